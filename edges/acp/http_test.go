package acp

import (
	"encoding/json"
	"net/http"
	"testing"
)

// noAnswer: the request gets no JSON-RPC answer (no JSON-RPC code is positive).
const noAnswer = 1

func TestHTTP(t *testing.T) {
	f := start(t, WithDevToken(token(t, "cap-dev", agentKey, grant("read_file"))))
	full := wildcard(t)
	list := `{"jsonrpc":"2.0","id":7,"method":"session/list_capabilities"}`
	cases := []struct {
		name, tok, body string
		headers         map[string]string
		status          int
		code            int // of the single answer, or noAnswer
		listed          int // capabilities listed, for list
	}{
		{"bearer", full, list, nil, http.StatusOK, 0, 5},
		{"X-Chio-Capability", "", list, map[string]string{"X-Chio-Capability": full}, http.StatusOK, 0, 5},
		{"dev capability", "", list, nil, http.StatusOK, 0, 1},
		{"dev capability same origin", "", list, map[string]string{"Sec-Fetch-Site": "same-origin"}, http.StatusOK, 0, 1},
		{"dev capability cross site", "", list, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden, CodeForbidden, 0},
		{"dev capability foreign origin", "", list, map[string]string{"Origin": "https://evil.example"}, http.StatusForbidden, CodeForbidden, 0},
		{"bearer cross site", full, list, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusOK, 0, 5},
		{"malformed authorization", "", list, map[string]string{"Authorization": "Basic abc"}, http.StatusUnauthorized, CodeUnauthorized, 0},
		{"not JSON content", full, list, map[string]string{"Content-Type": "text/plain"}, http.StatusUnsupportedMediaType, CodeInvalidRequest, 0},
		{"parse error", full, `{"jsonrpc":`, nil, http.StatusOK, CodeParseError, 0},
		{"empty batch", full, `[]`, nil, http.StatusOK, CodeInvalidRequest, 0},
		{"not JSON-RPC", full, `{"id":1,"method":"initialize"}`, nil, http.StatusOK, CodeInvalidRequest, 0},
		{"notification", full, `{"jsonrpc":"2.0","method":"initialize"}`, nil, http.StatusNoContent, noAnswer, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, raw := f.post(t, c.tok, c.body, c.headers)
			if status != c.status {
				t.Fatalf("HTTP %d, want %d: %s", status, c.status, raw)
			}
			if c.code == noAnswer {
				if len(raw) != 0 {
					t.Fatalf("body %s", raw)
				}
				return
			}
			var a answer
			if err := json.Unmarshal(raw, &a); err != nil {
				t.Fatalf("answer %s: %v", raw, err)
			}
			if a.code() != c.code {
				t.Fatalf("code %d, want %d: %s", a.code(), c.code, raw)
			}
			if c.code == 0 {
				var got struct{ Capabilities []Capability }
				ok(t, a, &got)
				if len(got.Capabilities) != c.listed || string(a.ID) != "7" {
					t.Fatalf("id %s listed %+v", a.ID, got.Capabilities)
				}
			}
		})
	}
}

func TestHTTPBatch(t *testing.T) {
	f := start(t)
	body := `[
		{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}},
		{"jsonrpc":"2.0","method":"session/list_capabilities"},
		{"jsonrpc":"2.0","id":"two","method":"_chio/tool/invoke","params":{"capabilityId":"read_file","arguments":{"path":"/a"}}},
		{"jsonrpc":"2.0","id":3,"method":"nope"},
		42
	]`
	status, raw := f.post(t, wildcard(t), body, nil)
	if status != http.StatusOK {
		t.Fatalf("HTTP %d: %s", status, raw)
	}
	var got []answer
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("answer %s: %v", raw, err)
	}
	want := []struct {
		id   string
		code int
	}{{"1", 0}, {`"two"`, 0}, {"3", CodeMethodNotFound}, {"null", CodeInvalidRequest}}
	if len(got) != len(want) {
		t.Fatalf("%d answers: %s", len(got), raw)
	}
	for i, w := range want {
		if string(got[i].ID) != w.id || got[i].code() != w.code {
			t.Errorf("answer %d: id %s code %d, want %s %d", i, got[i].ID, got[i].code(), w.id, w.code)
		}
	}
}

// Without a credential nor a dev capability, a call may still carry its
// own capability in _meta.
func TestHTTPMetaCapabilityWithoutHeader(t *testing.T) {
	f := start(t)
	if a := f.call(t, "", MethodListCapabilities, nil); a.code() != CodeUnauthorized {
		t.Fatalf("no capability: code %d", a.code())
	}
	var got struct{ Capabilities []Capability }
	ok(t, f.call(t, "", MethodListCapabilities, map[string]any{"_meta": map[string]any{"chioCapability": wildcard(t)}}), &got)
	if len(got.Capabilities) != 5 {
		t.Fatalf("listed %+v", got.Capabilities)
	}
}
