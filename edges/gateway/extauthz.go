package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// ExtAuthz is Envoy's external authorization service
// (envoy.service.auth.v3.Authorization) on a Point.
type ExtAuthz struct {
	authv3.UnimplementedAuthorizationServer
	p *Point
}

// RegisterExtAuthz serves p's ext_authz on s.
func (p *Point) RegisterExtAuthz(s grpc.ServiceRegistrar) {
	authv3.RegisterAuthorizationServer(s, &ExtAuthz{p: p})
}

// partialBodyHeader is set by Envoy when with_request_body sent only the
// start of the body.
const partialBodyHeader = "x-envoy-auth-partial-body"

// Check decides one request. An allowed one gets an OK status and
// ReceiptHeader on the upstream request and on the client's response; a
// refused one is denied with 401 or 403 (503 when the decision could not
// be recorded), ReceiptHeader and the JSON body forward authentication
// answers. A malformed CheckRequest is denied too: Envoy fails closed.
func (e *ExtAuthz) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	hr := req.GetAttributes().GetRequest().GetHttp()
	if hr == nil {
		return denied(refusal(http.StatusForbidden, "bad_request", "the check request carries no HTTP request attributes")), nil
	}
	h := headerOf(hr.GetHeaders())
	body := []byte(hr.GetBody())
	if len(hr.GetRawBody()) > 0 {
		body = hr.GetRawBody()
	}
	seen := bodySeen(h, body)
	sent := h.Get("Transfer-Encoding") != "" || (h.Get("Content-Length") != "" && h.Get("Content-Length") != "0") || len(body) > 0
	h.Del(partialBodyHeader)
	scheme := hr.GetScheme()
	if scheme != "https" {
		scheme = "http"
	}
	orig, err := rebuild(ctx, hr.GetMethod(), hr.GetPath(), hr.GetHost(), h)
	if err != nil {
		return denied(refusal(http.StatusForbidden, "bad_request", err.Error())), nil
	}
	a := e.p.decideHTTP(ctx, original{req: orig, body: body, seen: seen, sent: sent, origin: scheme + "://" + hr.GetHost(), via: "ext_authz"})
	if a.status == http.StatusOK {
		rh := header(ReceiptHeader, a.receiptID)
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
				Headers:              []*corev3.HeaderValueOption{rh},
				ResponseHeadersToAdd: []*corev3.HeaderValueOption{rh},
			}},
		}, nil
	}
	return denied(a), nil
}

// bodySeen reports whether the check carries the request's whole body.
// Envoy's size attribute counts the bytes received so far (0 when the
// check runs at header time), so it says nothing; what does: a request
// with neither Content-Length nor Transfer-Encoding has no body, and
// with_request_body marks a buffered body x-envoy-auth-partial-body:
// false, which must then be as long as Content-Length says.
func bodySeen(h http.Header, body []byte) bool {
	cl, te := h.Get("Content-Length"), h.Get("Transfer-Encoding")
	if te == "" && (cl == "" || cl == "0") {
		return len(body) == 0
	}
	if h.Get(partialBodyHeader) != "false" {
		return false
	}
	if cl != "" {
		n, err := strconv.ParseInt(cl, 10, 64)
		return err == nil && n == int64(len(body))
	}
	return true // chunked, buffered whole
}

// denied is the CheckResponse of a refused request.
func denied(a answer) *authv3.CheckResponse {
	code := codes.PermissionDenied
	switch a.status {
	case http.StatusUnauthorized:
		code = codes.Unauthenticated
	case http.StatusServiceUnavailable:
		code = codes.Unavailable
	}
	body, _ := json.Marshal(a.denial)
	hs := []*corev3.HeaderValueOption{header("Content-Type", "application/json")}
	if a.receiptID != "" {
		hs = append(hs, header(ReceiptHeader, a.receiptID))
	}
	if a.challenge != "" {
		hs = append(hs, header("WWW-Authenticate", a.challenge))
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code), Message: a.denial.Message},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(a.status)},
			Headers: hs,
			Body:    string(body),
		}},
	}
}

func header(k, v string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: strings.ToLower(k), Value: v},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD}
}
