// Package redact removes an operator's credentials from what an upstream
// answers, before the answer reaches a caller or a receipt: an upstream
// may echo the request's headers (an error page, httpbin's /headers), and
// the credentials Chio adds are the operator's, never the caller's.
package redact

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// MinSecret is the shortest credential redacted: a shorter one would
// match ordinary text far more often than it protects a key.
const MinSecret = 8

// Mark replaces each credential found.
const Mark = "[REDACTED]"

// Redactor replaces a fixed set of credentials. The zero value replaces
// nothing.
type Redactor struct {
	secrets [][]byte // longest first
}

// New returns a Redactor of values: each value, the credential of an
// "<scheme> <credential>" value (a Bearer token, which an upstream may
// echo alone), and their JSON-escaped forms. Values shorter than
// MinSecret are left out.
func New(values ...string) *Redactor {
	var out [][]byte
	add := func(s string) {
		if len(s) < MinSecret {
			return
		}
		out = append(out, []byte(s))
		if esc, err := json.Marshal(s); err == nil {
			if e := esc[1 : len(esc)-1]; string(e) != s {
				out = append(out, e)
			}
		}
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		add(v)
		if _, cred, ok := strings.Cut(v, " "); ok {
			add(strings.TrimSpace(cred))
		}
	}
	// Longest first, so a whole value goes before the credential inside
	// it, and the result does not depend on the order of values.
	slices.SortFunc(out, func(a, b []byte) int {
		if d := len(b) - len(a); d != 0 {
			return d
		}
		return bytes.Compare(a, b)
	})
	return &Redactor{secrets: slices.CompactFunc(out, bytes.Equal)}
}

// FromHeader is New of every value of h.
func FromHeader(h http.Header) *Redactor {
	var values []string
	for _, vs := range h {
		values = append(values, vs...)
	}
	return New(values...)
}

// Bytes returns b with each credential replaced by Mark, and whether any
// was. b itself is left unchanged.
func (r *Redactor) Bytes(b []byte) ([]byte, bool) {
	changed := false
	if r == nil {
		return b, false
	}
	for _, sec := range r.secrets {
		if bytes.Contains(b, sec) {
			b = bytes.ReplaceAll(b, sec, []byte(Mark))
			changed = true
		}
	}
	return b, changed
}

// String is Bytes for a message.
func (r *Redactor) String(s string) string {
	if r == nil {
		return s
	}
	for _, sec := range r.secrets {
		s = strings.ReplaceAll(s, string(sec), Mark)
	}
	return s
}

// Collector gathers, during one request, the credentials the transports
// below a reader attach, so that the reader can redact them from the
// answer: a transport that adds a credential calls Collect with its
// request's context.
type Collector struct {
	mu     sync.Mutex
	values []string
}

type collectorKey struct{}

// WithCollector returns ctx carrying a new Collector.
func WithCollector(ctx context.Context) (context.Context, *Collector) {
	c := &Collector{}
	return context.WithValue(ctx, collectorKey{}, c), c
}

// Collect records values with ctx's Collector; without one it does nothing.
func Collect(ctx context.Context, values ...string) {
	c, _ := ctx.Value(collectorKey{}).(*Collector)
	if c == nil || len(values) == 0 {
		return
	}
	c.mu.Lock()
	c.values = append(c.values, values...)
	c.mu.Unlock()
}

// Redactor is New of the values collected so far.
func (c *Collector) Redactor() *Redactor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return New(c.values...)
}
