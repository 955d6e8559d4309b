package protect

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

const goodBody = `{"name":"rex","count":2}`

// TestHostileBodies: a body strictjson refuses is answered 400 with the
// JSON error body, before the kernel: no receipt, no decision, nothing
// forwarded. Among them the body that once reached the API reordered:
// the guards read /body/name "ok", an API matching names without case and
// keeping the first read "evil".
func TestHostileBodies(t *testing.T) {
	f := start(t)
	tok := valid(t, "httpPost")
	if resp, body := send(t, "POST", f.url+"/post", tok, "application/json", []byte(goodBody)); resp.StatusCode != http.StatusOK {
		t.Fatalf("the valid body: %d %s", resp.StatusCode, body)
	}
	cases := []hostilejson.Case{{Name: "case-variant name, other value", Doc: []byte(`{"name":"ok","Name":"evil"}`), Err: strictjson.ErrDuplicateMember}}
	cases = append(cases, hostilejson.Variants([]byte(goodBody))...)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			resp, body := send(t, "POST", f.url+"/post", tok, "application/json", c.Doc)
			var d denial
			if err := json.Unmarshal(body, &d); resp.StatusCode != http.StatusBadRequest || err != nil || d.Error != "bad_request" {
				t.Fatalf("%d %s, want 400 bad_request", resp.StatusCode, body)
			}
			// The strict reader refused it (its errors give an offset)
			// reading the request, before the kernel, and nothing of the
			// body is quoted back.
			if !strings.Contains(d.Message, "from request") || !strings.Contains(d.Message, "offset") ||
				strings.Contains(d.Message, "evil") || strings.Contains(d.Message, "zz") {
				t.Fatalf("message %q", d.Message)
			}
			if d.ReceiptID != "" || resp.Header.Get(ReceiptHeader) != "" {
				t.Fatalf("a receipt for a request that never reached the kernel: %s", body)
			}
		})
	}
	if n := f.upstream.Load(); n != 1 {
		t.Fatalf("the API received %d requests, want the valid one", n)
	}
	if d := natstest.Decisions(t, f.js); len(d) != 1 {
		t.Fatalf("%d decisions, want the valid one's", len(d))
	}
}

// TestAnswerTooLarge: an answer over the bound is read no further and
// fails the call: 502 to the client, its receipt named, the outcome
// failed with the reason.
func TestAnswerTooLarge(t *testing.T) {
	f := startBounded(t, 1000)
	resp, body := send(t, "GET", f.url+"/bytes/2000", valid(t, "*"), "", nil)
	rid := resp.Header.Get(ReceiptHeader)
	var d denial
	if err := json.Unmarshal(body, &d); resp.StatusCode != http.StatusBadGateway || err != nil || d.Error != "upstream_error" || rid == "" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	o, ok := natstest.Outcomes(t, f.js)[rid]
	if !ok || o.Outcome != schemas.OutcomeFailed || !strings.Contains(o.Reason, "too large") {
		t.Fatalf("outcome %+v", o)
	}
}

// FuzzBody: no body panics the proxy; one strictjson refuses is answered
// 400 (413 past the bound) and never forwarded; one forwarded is one
// strictjson accepts.
func FuzzBody(f *testing.F) {
	fx := start(f)
	tok := valid(f, "httpPost")
	f.Add([]byte(goodBody))
	f.Add([]byte(`{"name":"ok","Name":"evil"}`))
	for _, c := range hostilejson.Variants([]byte(goodBody)) {
		f.Add(c.Doc)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		before := fx.upstream.Load()
		resp, answer := send(t, "POST", fx.url+"/post", tok, "application/json", body)
		forwarded := fx.upstream.Load() != before
		if strictjson.Valid(body) != nil {
			if forwarded || resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge {
				t.Fatalf("a body strictjson refuses: %d %s, forwarded %v", resp.StatusCode, answer, forwarded)
			}
		}
	})
}
