package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// authenticate runs before the SDK's handler on every request: it finds
// the caller's capability and its proof of possession, refuses a request
// without one (401), a cross-site browser request under the dev
// capability (403) and a capability or proof the kernel refuses (401,
// after the deny receipts of the request's tool calls), stamps each
// tools/call with its JSON-RPC id and hands the caller on in the
// request's context. A body readMessages refuses gets its JSON-RPC error
// (400) once the caller is authenticated, and none of it is recorded.
//
// One request is one proof. A request made of one tools/call is admitted
// (its decision write settles the proof's one-time claim), any other is
// identified (the claim settled at once). A tools/call may bring its own
// tool proof in params._meta (MetaDPoPProof) instead of a DPoP header:
// then it is admitted under that proof, or, in a batch of such calls,
// each call under its own.
func (e *Edge) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err != nil {
			unreadable(w, err)
			return
		}
		var in incoming
		if r.Method == http.MethodPost {
			in = readMessages(body)
		}
		msgs := in.msgs // nil for a refused body: none of it is recorded
		presented, err := dpop.FromRequest(r, e.opts.origin)
		token, dev := presented.Token, false
		if err != nil {
			if dpop.Presents(r.Header) || e.opts.devToken == "" {
				what := "a chio.capability.v1 token is required"
				if len(e.opts.authServers) > 0 {
					what = "a chio.capability.v1 token or an access token of " + strings.Join(e.opts.authServers, ", ") +
						" is required (the resource's metadata, named in WWW-Authenticate, says where to get one)"
				}
				dpop.SetChallenge(w.Header(), "", e.challenge(r))
				writeError(w, http.StatusUnauthorized, msgs, rpcError(CodeUnauthorized,
					"chio: "+what+", as Authorization: DPoP with a DPoP proof, or as "+
						"Authorization: Bearer or X-Chio-Capability: "+err.Error(), nil))
				return
			}
			token, dev = e.opts.devToken, true
		}
		if why := crossSite(r); dev && why != "" {
			writeError(w, http.StatusForbidden, msgs, rpcError(CodeForbidden, "chio: a cross-site browser request cannot "+
				"run tools under the dev capability ("+why+"): present a capability (Authorization: DPoP, Authorization: "+
				"Bearer or X-Chio-Capability), or call from the same origin", nil))
			return
		}
		c := &caller{token: token, proof: kernel.FromPresented(presented), refused: &proofRefusal{}}
		ctx := r.Context()
		var dec *kernel.Decision
		calls, own := toolCalls(msgs)
		switch {
		case c.proof == nil && own && len(msgs) == 1:
			c.proof, c.ownProof = e.callProof(calls[0].proof, calls[0].name, calls[0].args), true
			c.id, dec = e.admit(ctx, token, c.proof)
		case c.proof == nil && own:
			// A batch of calls each with its own proof: govern admits each.
		case len(msgs) == 1 && len(calls) == 1 && calls[0].proof == nil:
			c.id, dec = e.admit(ctx, token, c.proof)
		default:
			c.id, dec = e.kernel.Identify(ctx, token, c.proof)
		}
		if dec != nil {
			e.refuseHTTP(w, r, c, msgs, dec)
			return
		}
		if in.refusal != nil {
			// Whatever the SDK would make of it, the record could read it
			// otherwise: answered here, in JSON-RPC, and nothing runs.
			writeErrorID(w, http.StatusBadRequest, in.id, in.refusal)
			return
		}
		if body != nil {
			body = stampMessages(in, body)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		jw := &jsonErrors{ResponseWriter: w, msgs: msgs, refused: c.refused}
		next.ServeHTTP(jw, r.WithContext(withCaller(ctx, c)))
		jw.finish()
	})
}

// toolCalls are the tools/call requests of msgs; own reports that there is
// at least one and that every request of msgs is one bringing its own
// tool proof.
func toolCalls(msgs []message) (calls []toolCall, own bool) {
	own = true
	for _, m := range msgs {
		c, ok := m.toolCall()
		if ok {
			calls = append(calls, c)
		}
		if m.request() && (!ok || c.proof == nil) {
			own = false
		}
	}
	return calls, own && len(calls) > 0
}

// refuseHTTP answers a capability or proof the kernel refused: 401, after
// the deny receipts of the body's tool calls (503 if they could not be
// written), with the DPoP challenge naming a refused proof's check; 503
// with Retry-After, the receipts written, when the proof could not be
// checked because the replay state is unreachable.
func (e *Edge) refuseHTTP(w http.ResponseWriter, r *http.Request, c *caller, msgs []message, dec *kernel.Decision) {
	calls, _ := toolCalls(msgs)
	data, err := e.refuse(r.Context(), c.token, c.proof, calls, dec)
	if err != nil {
		e.log.Error("mcp: refusal not recorded", "err", err)
		writeError(w, http.StatusServiceUnavailable, msgs, rpcError(CodeNotRecorded,
			"chio: the refusal could not be recorded: "+err.Error(), nil))
		return
	}
	status := setProofStatus(w.Header(), dec.DPoPCheck(), e.challenge(r))
	writeError(w, status, msgs, refusedError(dec, data))
}

// bearerChallenge is a 401's Bearer challenge, where a bearer token
// could have done.
const bearerChallenge = `Bearer realm="chio", charset="UTF-8"`

// unreadable answers a body that could not be read: 413 when too large.
func unreadable(w http.ResponseWriter, err error) {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		writeError(w, http.StatusRequestEntityTooLarge, nil, rpcError(codeInvalidRequest,
			fmt.Sprintf("request body exceeds %d bytes", tooLarge.Limit), nil))
		return
	}
	writeError(w, http.StatusBadRequest, nil, rpcError(codeInvalidRequest, "read the request body: "+err.Error(), nil))
}

// readBody reads a POST body of at most MaxBodyBytes; other methods have
// none (nil).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	if r.Method != http.MethodPost || r.Body == nil {
		return nil, nil
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return nil, err
	}
	return b, nil
}

// crossSite says why a browser request comes from another site: its
// Sec-Fetch-Site is neither same-origin nor none (a navigation the user
// made), or its Origin is not the request's own host. "" means it does
// not; requests without these headers (every non-browser client) pass.
// The dev capability acts for anyone who can reach the port, so a web page
// must not reach a loopback `chio up` through the visitor's browser.
func crossSite(r *http.Request) string {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return "Sec-Fetch-Site is " + site
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Sprintf("Origin %q is not this host (%s)", origin, r.Host)
		}
	}
	return ""
}

// writeError answers a JSON-RPC error response with status, which the
// SDK's client surfaces as the call's error. It answers the request's id
// when the body held a single message; a 401 without a challenge set
// names the Bearer and DPoP schemes.
func writeError(w http.ResponseWriter, status int, msgs []message, werr *jsonrpc.Error) {
	id := json.RawMessage("null")
	if len(msgs) == 1 {
		if raw, ok := msgs[0]["id"]; ok && decodeID(raw) != nil {
			id = raw
		}
	}
	writeErrorID(w, status, id, werr)
}

// errorBody is a JSON-RPC error response answering id (raw, as sent).
func errorBody(id json.RawMessage, werr *jsonrpc.Error) []byte {
	body, err := marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, werr})
	if err != nil {
		body = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"chio: encode the error"}}`)
	}
	return body
}

// writeErrorID is writeError answering id.
func writeErrorID(w http.ResponseWriter, status int, id json.RawMessage, werr *jsonrpc.Error) {
	body := errorBody(id, werr)
	if status == http.StatusUnauthorized && w.Header().Get("WWW-Authenticate") == "" {
		dpop.SetChallenge(w.Header(), "", bearerChallenge)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
