// Package dpopa2a binds the calls of an a2a-go v2 client
// (github.com/a2aproject/a2a-go/v2/a2aclient) to the holder of a Chio
// capability: every call goes out with "Authorization: DPoP <token>" and a
// fresh RFC 9449 proof (schemas/dpop) signed by the token's subject key,
// for exactly the request the client's transport is about to send.
//
// A Chio edge honours a capability that can delegate (or one whose grant
// has dpop_required, or any capability on an edge run with --require-dpop)
// only with such a proof; a leaf capability may still go as a bearer
// token, and a proof, when sent, must be valid for it too.
//
// # What is signed, per binding
//
//   - JSON-RPC: htm POST, htu the interface URL (the client posts every
//     method there).
//   - HTTP+JSON (REST): the method and URL a2a-go's REST transport
//     (v2.4.0, a2aclient/rest.go; a2acompat/a2av0 for A2A 0.3) builds for
//     the call: the path of the operation (with the request's tenant, else
//     the interface's, else a2a.TenantFrom(ctx) unless the interceptor is
//     built WithoutTenantPropagation, mirroring
//     a2aclient.Config.DisableTenantPropagation) joined to the interface
//     URL. The protocol version the client negotiated (its A2A-Version
//     service parameter) picks the 1.0 or the 0.3 routes.
//   - gRPC: metadata "authorization: DPoP <token>" and "dpop: <proof>",
//     htm POST and htu "http://<authority><full method>" (https with
//     WithGRPCTLS), e.g. http://127.0.0.1:5000/lf.a2a.v1.A2AService/SendMessage.
//     The authority is the interface URL as grpc.NewClient reads it
//     (host:port, or the endpoint of a dns:/// or passthrough:/// target);
//     WithGRPCAuthority sets it for a connection dialled otherwise (for
//     instance with grpc.WithAuthority).
//
// # Which binding
//
// A CallInterceptor sees the interface URL (Request.BaseURL), not its
// binding. The interceptor takes the binding from the card
// (Request.Card.SupportedInterfaces whose URL is the BaseURL), which is
// there for a client made with a2aclient.NewFromCard; WithBinding fixes it
// instead, and is needed for a client made from endpoints alone or for a
// card listing two bindings at one URL. A call whose binding cannot be
// told is failed before it is sent, never sent unsigned.
//
// # REST through the request itself
//
// HTTPClient wraps an *http.Client in dpop.Transport, which signs every
// request it carries for its own method and URL, whatever built it. Give
// it to a2aclient.WithRESTTransport (or WithJSONRPCTransport) where the
// request's URL may differ from what the interceptor rebuilds (a
// transport other than a2a-go's, a proxy, a customised tenant rule): the
// transport's proof replaces the interceptor's. Either alone suffices for
// JSON-RPC and REST; gRPC needs the interceptor.
//
// # Example
//
//	signer, err := dpop.NewSigner(agentKey, agentToken)
//	if err != nil { ... }
//	card, err := agentcard.DefaultResolver.Resolve(ctx, "https://edge.example")
//	if err != nil { ... }
//	client, err := a2aclient.NewFromCard(ctx, card,
//		a2aclient.WithCallInterceptors(dpopa2a.New(signer)),
//		a2agrpc.WithGRPCTransport(grpc.WithTransportCredentials(creds)))
//	if err != nil { ... }
//	res, err := client.SendMessage(ctx, &a2a.SendMessageRequest{
//		Message: a2a.NewMessage(a2a.MessageRoleUser, a2a.NewTextPart("hello")),
//	})
//
// Over TLS gRPC, build the interceptor with dpopa2a.New(signer,
// dpopa2a.WithGRPCTLS()).
package dpopa2a

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/chio-ledger/chio/schemas/dpop"
)

// GRPCMetadataKey is the gRPC metadata key of the proof (gRPC metadata
// keys are lower case; the token goes under "authorization").
const GRPCMetadataKey = "dpop"

// Interceptor is an a2aclient.CallInterceptor that signs every call with
// a dpop.Signer. It is safe for concurrent use.
type Interceptor struct {
	a2aclient.PassthroughInterceptor
	signer          *dpop.Signer
	binding         a2a.TransportProtocol
	grpcScheme      string
	grpcAuthority   string
	noTenantFromCtx bool
}

var _ a2aclient.CallInterceptor = (*Interceptor)(nil)

// Option configures an Interceptor.
type Option func(*Interceptor)

// WithBinding fixes the binding of the client's interface
// (a2a.TransportProtocolJSONRPC, TransportProtocolHTTPJSON or
// TransportProtocolGRPC) instead of reading it from the card.
func WithBinding(b a2a.TransportProtocol) Option { return func(i *Interceptor) { i.binding = b } }

// WithGRPCTLS makes gRPC proofs name https: the connection is TLS.
func WithGRPCTLS() Option { return func(i *Interceptor) { i.grpcScheme = "https" } }

// WithGRPCAuthority sets the :authority the gRPC connection sends, for a
// connection whose authority is not the interface URL's host:port.
func WithGRPCAuthority(authority string) Option {
	return func(i *Interceptor) { i.grpcAuthority = authority }
}

// WithoutTenantPropagation mirrors a2aclient.Config.DisableTenantPropagation:
// a REST path takes no tenant from the context.
func WithoutTenantPropagation() Option { return func(i *Interceptor) { i.noTenantFromCtx = true } }

// New returns an interceptor signing with s.
func New(s *dpop.Signer, opts ...Option) *Interceptor {
	i := &Interceptor{signer: s, grpcScheme: "http"}
	for _, o := range opts {
		o(i)
	}
	return i
}

// ClientOption is the a2aclient factory option installing New(s, opts...).
func ClientOption(s *dpop.Signer, opts ...Option) a2aclient.FactoryOption {
	return a2aclient.WithCallInterceptors(New(s, opts...))
}

// HTTPClient returns a copy of base (a new client when nil) whose
// transport is dpop.Transport over base's: every request it sends carries
// the signer's token and a proof for that request's own method and URL.
func HTTPClient(s *dpop.Signer, base *http.Client) *http.Client {
	c := &http.Client{}
	if base != nil {
		*c = *base
	}
	c.Transport = &dpop.Transport{Signer: s, Base: c.Transport}
	return c
}

// Before implements a2aclient.CallInterceptor: it sets the token and a
// proof for the call on req.ServiceParams, or fails the call.
func (i *Interceptor) Before(ctx context.Context, req *a2aclient.Request) (context.Context, any, error) {
	iface, err := i.iface(req)
	if err != nil {
		return ctx, nil, err
	}
	version := firstParam(req.ServiceParams, a2a.SvcParamVersion)
	if version == "" {
		version = string(iface.ProtocolVersion)
	}
	method, htu := "", ""
	switch iface.ProtocolBinding {
	case a2a.TransportProtocolJSONRPC:
		u, err := url.Parse(req.BaseURL)
		if err != nil || u.Host == "" {
			return ctx, nil, fmt.Errorf("dpopa2a: JSON-RPC interface URL %q: not an absolute URL", req.BaseURL)
		}
		method, htu = http.MethodPost, dpop.RequestURLOf(u.Scheme, u.Host, u.EscapedPath())
	case a2a.TransportProtocolHTTPJSON:
		if method, htu, err = i.restTarget(ctx, req, iface, version); err != nil {
			return ctx, nil, err
		}
	case a2a.TransportProtocolGRPC:
		full, err := grpcMethod(req, version)
		if err != nil {
			return ctx, nil, err
		}
		authority := i.grpcAuthority
		if authority == "" {
			authority = grpcTargetAuthority(req.BaseURL)
		}
		method, htu = http.MethodPost, i.grpcScheme+"://"+authority+full
	default:
		return ctx, nil, fmt.Errorf("dpopa2a: binding %q is not one this interceptor signs", iface.ProtocolBinding)
	}
	proof, err := i.signer.Proof(method, htu)
	if err != nil {
		return ctx, nil, fmt.Errorf("dpopa2a: %w", err)
	}
	if req.ServiceParams == nil {
		req.ServiceParams = a2aclient.ServiceParams{}
	}
	setParam(req.ServiceParams, "X-Chio-Capability", "")
	setParam(req.ServiceParams, "Authorization", "DPoP "+i.signer.Token())
	setParam(req.ServiceParams, dpop.Header, proof)
	return ctx, nil, nil
}

// setParam replaces every value of key (any case) with value; "" removes
// it. Keys are stored lower case, as ServiceParams.Append stores them.
func setParam(p a2aclient.ServiceParams, key, value string) {
	for k := range p {
		if strings.EqualFold(k, key) {
			delete(p, k)
		}
	}
	if value != "" {
		p[strings.ToLower(key)] = []string{value}
	}
}

func firstParam(p a2aclient.ServiceParams, key string) string {
	for k, vs := range p {
		if strings.EqualFold(k, key) && len(vs) > 0 {
			return vs[0]
		}
	}
	return ""
}

// iface is the interface the client is connected to: the card's at
// req.BaseURL (the one of the negotiated version, if it lists several),
// with the binding WithBinding fixed, if any.
func (i *Interceptor) iface(req *a2aclient.Request) (a2a.AgentInterface, error) {
	var found []a2a.AgentInterface
	if req.Card != nil {
		for _, f := range req.Card.SupportedInterfaces {
			if f != nil && sameInterfaceURL(f.URL, req.BaseURL) && (i.binding == "" || f.ProtocolBinding == i.binding) {
				found = append(found, *f)
			}
		}
	}
	if len(found) == 0 {
		if i.binding == "" {
			return a2a.AgentInterface{}, fmt.Errorf("dpopa2a: the card lists no interface at %q: build the interceptor WithBinding", req.BaseURL)
		}
		return a2a.AgentInterface{URL: req.BaseURL, ProtocolBinding: i.binding}, nil
	}
	version := firstParam(req.ServiceParams, a2a.SvcParamVersion)
	best := found[0]
	for _, f := range found[1:] {
		if f.ProtocolBinding != best.ProtocolBinding {
			return a2a.AgentInterface{}, fmt.Errorf("dpopa2a: the card lists bindings %s and %s at %q: build the interceptor WithBinding",
				best.ProtocolBinding, f.ProtocolBinding, req.BaseURL)
		}
		if string(f.ProtocolVersion) == version && string(best.ProtocolVersion) != version {
			best = f
		}
	}
	return best, nil
}

func sameInterfaceURL(a, b string) bool {
	return a == b || strings.TrimRight(a, "/") == strings.TrimRight(b, "/")
}

// v03 reports whether a negotiated A2A-Version is 0.3 (or a 0.3.x).
func v03(version string) bool { return version == "0.3" || strings.HasPrefix(version, "0.3.") }

// restTarget is the method and htu of a REST call, as a2a-go's REST
// transport (1.0) or its a2av0 compat transport (0.3) builds the request.
func (i *Interceptor) restTarget(ctx context.Context, req *a2aclient.Request, iface a2a.AgentInterface, version string) (string, string, error) {
	base, err := url.Parse(req.BaseURL)
	if err != nil || base.Host == "" {
		return "", "", fmt.Errorf("dpopa2a: REST interface URL %q: not an absolute URL", req.BaseURL)
	}
	old := v03(version)
	prefix := ""
	if old {
		prefix = "/v1"
	}
	streaming := req.Card == nil || req.Card.Capabilities.Streaming
	var method, path, tenant string
	switch p := req.Payload.(type) {
	case *a2a.SendMessageRequest:
		method, path, tenant = http.MethodPost, "/message:send", p.Tenant
		if req.Method == "SendStreamingMessage" && streaming {
			path = "/message:stream"
		}
	case *a2a.GetTaskRequest:
		method, path, tenant = http.MethodGet, "/tasks/"+string(p.ID), p.Tenant
	case *a2a.ListTasksRequest:
		method, path, tenant = http.MethodGet, "/tasks", p.Tenant
	case *a2a.CancelTaskRequest:
		method, path, tenant = http.MethodPost, "/tasks/"+string(p.ID)+":cancel", p.Tenant
	case *a2a.SubscribeToTaskRequest:
		method, path, tenant = http.MethodPost, "/tasks/"+string(p.ID)+":subscribe", p.Tenant
		if old {
			method = http.MethodGet
		}
	case *a2a.GetTaskPushConfigRequest:
		method, path, tenant = http.MethodGet, "/tasks/"+string(p.TaskID)+"/pushNotificationConfigs/"+p.ID, p.Tenant
	case *a2a.ListTaskPushConfigRequest:
		method, path, tenant = http.MethodGet, "/tasks/"+string(p.TaskID)+"/pushNotificationConfigs", p.Tenant
	case *a2a.PushConfig:
		method, path, tenant = http.MethodPost, "/tasks/"+string(p.TaskID)+"/pushNotificationConfigs", p.Tenant
	case *a2a.DeleteTaskPushConfigRequest:
		method, path, tenant = http.MethodDelete, "/tasks/"+string(p.TaskID)+"/pushNotificationConfigs/"+p.ID, p.Tenant
	case *a2a.GetExtendedAgentCardRequest:
		method, path, tenant = http.MethodGet, "/extendedAgentCard", p.Tenant
		if old {
			path = "/card"
		}
	default:
		return "", "", fmt.Errorf("dpopa2a: %s: payload %T is not one this interceptor knows the REST route of", req.Method, req.Payload)
	}
	rel, err := url.Parse(prefix + path)
	if err != nil {
		return "", "", fmt.Errorf("dpopa2a: %s: path: %w", req.Method, err)
	}
	if old {
		tenant = "" // the 0.3 routes name no tenant
	} else if tenant == "" {
		tenant = iface.Tenant
		if tenant == "" && !i.noTenantFromCtx {
			tenant, _ = a2a.TenantFrom(ctx)
		}
	}
	var u *url.URL
	if tenant != "" {
		u = base.JoinPath(tenant, rel.Path)
	} else {
		u = base.JoinPath(rel.Path)
	}
	return method, dpop.RequestURLOf(u.Scheme, u.Host, u.EscapedPath()), nil
}

// grpcMethods are the full gRPC method names of the client's methods: A2A
// 1.0's service (lf.a2a.v1.A2AService, a2agrpc/v1) and 0.3's
// (a2a.v1.A2AService, a2agrpc/v0).
var grpcMethods = map[string][2]string{
	"SendMessage":          {"/lf.a2a.v1.A2AService/SendMessage", "/a2a.v1.A2AService/SendMessage"},
	"SendStreamingMessage": {"/lf.a2a.v1.A2AService/SendStreamingMessage", "/a2a.v1.A2AService/SendStreamingMessage"},
	"GetTask":              {"/lf.a2a.v1.A2AService/GetTask", "/a2a.v1.A2AService/GetTask"},
	"ListTasks":            {"/lf.a2a.v1.A2AService/ListTasks", "/a2a.v1.A2AService/ListTasks"},
	"CancelTask":           {"/lf.a2a.v1.A2AService/CancelTask", "/a2a.v1.A2AService/CancelTask"},
	"SubscribeToTask":      {"/lf.a2a.v1.A2AService/SubscribeToTask", "/a2a.v1.A2AService/TaskSubscription"},
	"GetTaskPushConfig":    {"/lf.a2a.v1.A2AService/GetTaskPushNotificationConfig", "/a2a.v1.A2AService/GetTaskPushNotificationConfig"},
	"ListTaskPushConfigs":  {"/lf.a2a.v1.A2AService/ListTaskPushNotificationConfigs", "/a2a.v1.A2AService/ListTaskPushNotificationConfig"},
	"CreateTaskPushConfig": {"/lf.a2a.v1.A2AService/CreateTaskPushNotificationConfig", "/a2a.v1.A2AService/CreateTaskPushNotificationConfig"},
	"DeleteTaskPushConfig": {"/lf.a2a.v1.A2AService/DeleteTaskPushNotificationConfig", "/a2a.v1.A2AService/DeleteTaskPushNotificationConfig"},
	"GetExtendedAgentCard": {"/lf.a2a.v1.A2AService/GetExtendedAgentCard", "/a2a.v1.A2AService/GetAgentCard"},
}

// grpcMethod is the full method name the gRPC transport will call.
func grpcMethod(req *a2aclient.Request, version string) (string, error) {
	name := req.Method
	if name == "SendStreamingMessage" && req.Card != nil && !req.Card.Capabilities.Streaming {
		name = "SendMessage" // the client falls back to a plain send
	}
	m, ok := grpcMethods[name]
	if !ok {
		return "", errors.New("dpopa2a: no gRPC method is known for " + req.Method)
	}
	if v03(version) {
		return m[1], nil
	}
	return m[0], nil
}

// grpcTargetAuthority is the :authority grpc.NewClient sends for target:
// the target itself when it is host:port, the endpoint of a dns or
// passthrough URL, localhost for a unix socket, else the URL's host.
func grpcTargetAuthority(target string) string {
	if !strings.Contains(target, "://") {
		if rest, ok := strings.CutPrefix(target, "dns:"); ok {
			return rest
		}
		if strings.HasPrefix(target, "unix:") {
			return "localhost"
		}
		return target
	}
	u, err := url.Parse(target)
	if err != nil {
		return target
	}
	switch u.Scheme {
	case "dns", "passthrough":
		return strings.TrimPrefix(u.Path, "/")
	case "unix", "unix-abstract":
		return "localhost"
	}
	return u.Host
}
