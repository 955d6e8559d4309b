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
	"github.com/chio-ledger/chio/schemas"
)

// authenticate runs before the SDK's handler on every request: it finds
// the caller's capability, refuses a request without one (401), a
// cross-site browser request under the dev capability (403) and a
// capability the kernel refuses (401, after the deny receipts of the
// request's tool calls), stamps each tools/call with its JSON-RPC id and
// hands the identified caller on in the request's context.
func (e *Edge) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := readBody(w, r)
		if err != nil {
			unreadable(w, err)
			return
		}
		msgs, _, parsed := parseBody(body)
		token, dev, err := e.token(r.Header)
		if err != nil {
			writeError(w, http.StatusUnauthorized, msgs, rpcError(CodeUnauthorized,
				"chio: a chio.capability.v1 token is required, as Authorization: Bearer or X-Chio-Capability: "+err.Error(), nil))
			return
		}
		if why := crossSite(r); dev && why != "" {
			writeError(w, http.StatusForbidden, msgs, rpcError(CodeForbidden, "chio: a cross-site browser request cannot "+
				"run tools under the dev capability ("+why+"): present a capability as Authorization: Bearer or "+
				"X-Chio-Capability, or call from the same origin", nil))
			return
		}
		id, dec := e.kernel.Identify(r.Context(), token, nil)
		if dec != nil {
			e.refuseHTTP(w, r, token, msgs, dec)
			return
		}
		if r.Method == http.MethodPost && !parsed {
			// The SDK would answer in plain text; MCP clients read JSON-RPC.
			code, what := int64(codeParseError), "the body is not JSON"
			if json.Valid(body) {
				code, what = codeInvalidRequest, "the body is neither a JSON-RPC message nor a batch of them"
			}
			writeError(w, http.StatusBadRequest, nil, rpcError(code, what, nil))
			return
		}
		if body != nil {
			body = stampIDs(body)
			r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		}
		jw := &jsonErrors{ResponseWriter: w, msgs: msgs}
		next.ServeHTTP(jw, r.WithContext(withCaller(r.Context(), &caller{token: token, id: id})))
		jw.finish()
	})
}

// refuseHTTP answers a capability the kernel refused: 401, after the deny
// receipts of the body's tool calls (503 if they could not be written).
func (e *Edge) refuseHTTP(w http.ResponseWriter, r *http.Request, token string, msgs []message, dec *kernel.Decision) {
	var calls []toolCall
	for _, m := range msgs {
		if c, ok := m.toolCall(); ok {
			calls = append(calls, c)
		}
	}
	data, err := e.refuse(r.Context(), token, calls, dec)
	if err != nil {
		e.log.Error("mcp: refusal not recorded", "err", err)
		writeError(w, http.StatusServiceUnavailable, msgs, rpcError(CodeNotRecorded,
			"chio: the refusal could not be recorded: "+err.Error(), nil))
		return
	}
	writeError(w, http.StatusUnauthorized, msgs, rpcError(CodeUnauthorized, refusedMessage(dec), data))
}

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

// token is the caller's capability (Authorization: Bearer or
// X-Chio-Capability), or the dev capability (dev true) for a caller that
// sends no credential at all.
func (e *Edge) token(h http.Header) (tok string, dev bool, _ error) {
	tok, err := schemas.CapabilityFromHeaders(h)
	if err == nil {
		return tok, false, nil
	}
	if h.Get("Authorization") == "" && h.Get("X-Chio-Capability") == "" && e.opts.devToken != "" {
		return e.opts.devToken, true, nil
	}
	return "", false, err
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
// when the body held a single message; a 401 names the Bearer scheme.
func writeError(w http.ResponseWriter, status int, msgs []message, werr *jsonrpc.Error) {
	id := json.RawMessage("null")
	if len(msgs) == 1 {
		if raw, ok := msgs[0]["id"]; ok && decodeID(raw) != nil {
			id = raw
		}
	}
	body, err := marshal(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *jsonrpc.Error  `json:"error"`
	}{"2.0", id, werr})
	if err != nil {
		body = []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"chio: encode the error"}}`)
	}
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="chio", charset="UTF-8"`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
