package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	zoo := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo"})
	tests := []struct {
		method, target string
		tool           string
		params         map[string]string
		wantErr        error
	}{
		{method: "GET", target: "/animals?limit=3", tool: "listAnimals", params: map[string]string{}},
		{method: "GET", target: "/animals/42", tool: "get_animals_id", params: map[string]string{"id": "42"}},
		{method: "PATCH", target: "/animals/42", tool: "renameAnimal", params: map[string]string{"id": "42"}},
		{method: "DELETE", target: "/animals/42", tool: "removeAnimal", params: map[string]string{"id": "42"}},
		{method: "GET", target: "/animals_id", tool: "get_animals_id_" + hex8("GET /animals_id"), params: map[string]string{}},
		// Escaped: one segment, decoded for Arguments to judge.
		{method: "GET", target: "/animals/a%2Fb", tool: "get_animals_id", params: map[string]string{"id": "a/b"}},
		{method: "GET", target: "/animals/%2e%2e", tool: "get_animals_id", params: map[string]string{"id": ".."}},
		{method: "PUT", target: "/animals/42", wantErr: ErrMethodNotAllowed},
		{method: "get", target: "/animals", wantErr: ErrMethodNotAllowed},
		{method: "GET", target: "/animals/42/photo", wantErr: ErrNoRoute}, // x-chio-publish: false
		{method: "POST", target: "/forms", wantErr: ErrNoRoute},           // not supported
		{method: "TRACE", target: "/forms", wantErr: ErrNoRoute},          // never published
		{method: "GET", target: "/v1/animals", wantErr: ErrNoRoute},       // the server's base path is not matched
		{method: "GET", target: "/animals/", wantErr: ErrNoRoute},
		{method: "GET", target: "/animals/1/2", wantErr: ErrNoRoute},
		{method: "GET", target: "/nope", wantErr: ErrNoRoute},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.target, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, nil)
			rt, params, err := zoo.Match(r)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !errors.Is(err, ErrNoRoute) {
					t.Fatalf("Match: err = %v, want %v (and ErrNoRoute)", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			if rt.Tool != tt.tool || !maps.Equal(params, tt.params) {
				t.Errorf("Match = %s %v, want %s %v", rt.Tool, params, tt.tool, tt.params)
			}
		})
	}
}

// incoming turns a request the bridge built for the upstream into the
// request a proxy in front of that upstream would receive.
func incoming(t *testing.T, out *http.Request) *http.Request {
	t.Helper()
	var body []byte
	if out.Body != nil {
		var err error
		if body, err = io.ReadAll(out.Body); err != nil {
			t.Fatal(err)
		}
	}
	in := httptest.NewRequest(out.Method, out.URL.RequestURI(), bytes.NewReader(body))
	in.Header = out.Header.Clone()
	return in
}

// canonical re-encodes JSON with sorted keys.
func canonical(t *testing.T, raw []byte) string {
	t.Helper()
	v, err := decodeJSON(raw)
	if err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	out, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestArgumentsRoundTrip: arguments → upstream request → (as received by a
// proxy) Match → Arguments gives the same arguments back.
func TestArgumentsRoundTrip(t *testing.T) {
	httpbin := mustBuild(t, "httpbin.yaml", Config{ServerID: "httpbin"})
	zoo := mustBuild(t, "zoo-3.0.yaml", Config{ServerID: "zoo"})
	base, err := url.Parse("http://upstream.test")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		b    *Bridge
		tool string
		args string
	}{
		{httpbin, "httpGet", `{"q":"a b&c=d/é","n":-5,"flag":true,"tags":["x","y z"],"ids":[1,2,3],"X-Trace":"t-1","session":"abc"}`},
		{httpbin, "httpGet", `{}`},
		{httpbin, "httpPost", `{"body":{"name":"rex","count":2,"nested":{"a":[1,2.5e3,null]}}}`},
		{httpbin, "get_anything_path", `{"path":"a b;c?d#e%41"}`},
		{httpbin, "post_anything_path", `{"path":"p","body":"hello\nworld"}`},
		{httpbin, "status", `{"code":418}`},
		{httpbin, "httpDelete", `{"reason":"done"}`},
		{zoo, "get_animals_id", `{"id":7,"query.id":"x"}`},
		{zoo, "listAnimals", `{"limit":10,"tags":["a"]}`},
		{zoo, "renameAnimal", `{"id":3,"body":"Rex"}`},
		{zoo, "post_animals_" + hex8("POST /animals"), `{"body":{"name":"Rex","kind":null,"friends":[{"name":"Tom","kind":"cat"}]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.tool+" "+tt.args, func(t *testing.T) {
			rt, ok := tt.b.Route(tt.tool)
			if !ok {
				t.Fatalf("no route %s", tt.tool)
			}
			ob, err := build(context.Background(), rt, base, json.RawMessage(tt.args))
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			in := incoming(t, ob.req)
			got, params, err := tt.b.Match(in)
			if err != nil || got != rt {
				t.Fatalf("Match = %v, %v; want %s", got, err, rt.Tool)
			}
			args, err := tt.b.Arguments(rt, in, params)
			if err != nil {
				t.Fatalf("Arguments: %v", err)
			}
			if canonical(t, args) != canonical(t, []byte(tt.args)) {
				t.Errorf("Arguments = %s\nwant        %s", args, tt.args)
			}
		})
	}
}

// TestProxyRebuild: a request as a proxy receives it → Arguments → the
// upstream request built from them carries the same operation data, and
// nothing the arguments do not hold.
func TestProxyRebuild(t *testing.T) {
	b := mustBuild(t, "httpbin.yaml", Config{ServerID: "httpbin"})
	base, err := url.Parse("http://upstream.test/prefix/")
	if err != nil {
		t.Fatal(err)
	}
	in := httptest.NewRequest("GET", "/get?q=a+b&n=5&tags=x&tags=y&ids=1,2&chio_capability=tok&extra=1", nil)
	in.Header.Set("X-Trace", "t-9")
	in.Header.Set("X-Unknown", "dropped")
	in.Header.Set("Authorization", "Bearer caller-token")
	in.AddCookie(&http.Cookie{Name: "session", Value: "s1"})
	in.AddCookie(&http.Cookie{Name: "other", Value: "dropped"})
	rt, params, err := b.Match(in)
	if err != nil {
		t.Fatal(err)
	}
	args, err := b.Arguments(rt, in, params)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"X-Trace":"t-9","ids":[1,2],"n":5,"q":"a b","session":"s1","tags":["x","y"]}`
	if canonical(t, args) != want {
		t.Fatalf("Arguments = %s, want %s", args, want)
	}
	ob, err := build(context.Background(), rt, base, args)
	if err != nil {
		t.Fatal(err)
	}
	out := ob.req
	if out.URL.Path != "/prefix/get" {
		t.Errorf("path = %q", out.URL.Path)
	}
	wantQuery := url.Values{"q": {"a b"}, "n": {"5"}, "tags": {"x", "y"}, "ids": {"1,2"}}
	if got := out.URL.Query(); !maps.EqualFunc(got, wantQuery, func(a, b []string) bool { return strings.Join(a, "\x00") == strings.Join(b, "\x00") }) {
		t.Errorf("query = %v, want %v", got, wantQuery)
	}
	for _, h := range []string{"X-Unknown", "Authorization"} {
		if out.Header.Get(h) != "" {
			t.Errorf("header %s was forwarded", h)
		}
	}
	if out.Header.Get("X-Trace") != "t-9" || out.Header.Get("Cookie") != "session=s1" {
		t.Errorf("headers = %v", out.Header)
	}
}

func TestArgumentsRefused(t *testing.T) {
	b := mustBuild(t, "httpbin.yaml", Config{ServerID: "httpbin"})
	big := bytes.Repeat([]byte(" "), MaxBodyBytes+1)
	tests := []struct {
		name        string
		method      string
		target      string
		contentType string
		body        []byte
		unsized     bool // no Content-Length: the bound is met while reading
		wantErr     error
	}{
		{name: "dot-dot", method: "GET", target: "/anything/..", wantErr: ErrBadArguments},
		{name: "encoded dot-dot", method: "GET", target: "/anything/%2e%2e", wantErr: ErrBadArguments},
		{name: "double-encoded dot-dot", method: "GET", target: "/anything/%252e%252e", wantErr: ErrBadArguments},
		{name: "encoded slash", method: "GET", target: "/anything/a%2Fb", wantErr: ErrBadArguments},
		{name: "encoded backslash", method: "GET", target: "/anything/a%5Cb", wantErr: ErrBadArguments},
		{name: "dot", method: "GET", target: "/anything/.", wantErr: ErrBadArguments},
		{name: "scalar given twice", method: "GET", target: "/get?q=1&q=2", wantErr: ErrBadArguments},
		{name: "not an integer", method: "GET", target: "/get?n=abc", wantErr: ErrBadArguments},
		{name: "not a boolean", method: "GET", target: "/get?flag=yes", wantErr: ErrBadArguments},
		{name: "path not an integer", method: "GET", target: "/status/abc", wantErr: ErrBadArguments},
		{name: "malformed query", method: "GET", target: "/get?q=%zz", wantErr: ErrBadArguments},
		{name: "required query missing", method: "DELETE", target: "/delete", wantErr: ErrBadArguments},
		{name: "body on an operation without one", method: "GET", target: "/get", body: []byte("x"), wantErr: ErrBadArguments},
		{name: "required body missing", method: "POST", target: "/post", wantErr: ErrBadArguments},
		{name: "invalid JSON body", method: "POST", target: "/post", contentType: "application/json", body: []byte("{"), wantErr: ErrBadArguments},
		{name: "body against its schema", method: "POST", target: "/post", contentType: "application/json", body: []byte(`{"count":1}`), wantErr: ErrBadArguments},
		{name: "wrong media type", method: "POST", target: "/post", contentType: "text/plain", body: []byte(`{"name":"x"}`), wantErr: ErrUnsupportedMediaType},
		{name: "text body not UTF-8", method: "POST", target: "/anything/x", contentType: "text/plain", body: []byte{0xff, 0xfe}, wantErr: ErrBadArguments},
		{name: "huge body", method: "POST", target: "/post", contentType: "application/json", body: big, wantErr: ErrBodyTooLarge},
		{name: "huge unsized body", method: "POST", target: "/post", contentType: "application/json", body: big, unsized: true, wantErr: ErrBodyTooLarge},
		{name: "JSON body with charset", method: "POST", target: "/post", contentType: "application/json; charset=utf-8", body: []byte(`{"name":"x"}`)},
		{name: "JSON body without Content-Type", method: "POST", target: "/post", body: []byte(`{"name":"x"}`)},
		{name: "plain name", method: "GET", target: "/anything/a%20b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(tt.method, tt.target, bytes.NewReader(tt.body))
			if tt.contentType != "" {
				r.Header.Set("Content-Type", tt.contentType)
			}
			if tt.unsized {
				r.ContentLength = -1
				r.Body = io.NopCloser(bytes.NewReader(tt.body))
			}
			rt, params, err := b.Match(r)
			if err != nil {
				t.Fatalf("Match: %v", err)
			}
			_, err = b.Arguments(rt, r, params)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Arguments: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Arguments: err = %v, want %v", err, tt.wantErr)
			}
		})
	}
}
