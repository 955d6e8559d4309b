package redact

import (
	"net/http"
	"testing"
)

func TestRedactor(t *testing.T) {
	r := New("Bearer sk-operator-key-1", "short", "user:pa\"ssword1")
	tests := []struct{ in, want string }{
		{`{"error":"bad header Authorization: Bearer sk-operator-key-1"}`, `{"error":"bad header Authorization: [REDACTED]"}`},
		{`key sk-operator-key-1 alone`, `key [REDACTED] alone`},
		{`{"userinfo":"user:pa\"ssword1"}`, `{"userinfo":"[REDACTED]"}`},
		{`short stays: short`, `short stays: short`},
		{`nothing here`, `nothing here`},
	}
	for _, tt := range tests {
		got, changed := r.Bytes([]byte(tt.in))
		if string(got) != tt.want || changed != (tt.in != tt.want) {
			t.Errorf("Bytes(%s) = %s, %v; want %s", tt.in, got, changed, tt.want)
		}
		if s := r.String(tt.in); s != tt.want {
			t.Errorf("String(%s) = %s, want %s", tt.in, s, tt.want)
		}
	}
	h := http.Header{"X-Api-Key": {"k-1234567890"}, "Authorization": {"Basic dXNlcjpwYXNz"}}
	if got, _ := FromHeader(h).Bytes([]byte("k-1234567890 and dXNlcjpwYXNz")); string(got) != "[REDACTED] and [REDACTED]" {
		t.Errorf("FromHeader: %s", got)
	}
	var none *Redactor
	if got, changed := none.Bytes([]byte("x")); string(got) != "x" || changed {
		t.Error("a nil Redactor changed its input")
	}
}

func TestCollector(t *testing.T) {
	Collect(t.Context(), "ignored-without-a-collector")
	ctx, c := WithCollector(t.Context())
	Collect(ctx, "Bearer token-attached-below")
	if got, _ := c.Redactor().Bytes([]byte(`{"echo":"token-attached-below"}`)); string(got) != `{"echo":"[REDACTED]"}` {
		t.Errorf("collected: %s", got)
	}
}
