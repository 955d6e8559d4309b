package openapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

const strictBody = `{"name":"ok","count":2}`

// TestHostileArguments: a request body or a JSON query parameter that
// strictjson refuses is refused by Arguments (ErrBadArguments, the
// strictjson error wrapped, nothing of the input quoted), as are
// arguments holding one that another edge hands Invoke, which then sends
// nothing. An upstream matching names without case, or keeping the first
// of two, would otherwise act on other values than the guards saw.
func TestHostileArguments(t *testing.T) {
	b := mustBuild(t, "strict.yaml", Config{ServerID: "httpbin"}) // the server id invocation names
	var hits atomic.Int64
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	t.Cleanup(api.Close)
	base, _ := url.Parse(api.URL)
	srv, err := NewServer(b, Upstream{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	arguments := func(target string, body []byte) (json.RawMessage, error) {
		r := httptest.NewRequest(http.MethodPost, target, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		rt, params, err := b.Match(r)
		if err != nil {
			t.Fatalf("Match: %v", err)
		}
		return b.Arguments(rt, r, params)
	}
	refused := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, ErrBadArguments) || !errors.Is(err, want) {
			t.Errorf("%s: err = %v, want %v and ErrBadArguments", what, err, want)
		}
		if err != nil && (strings.Contains(err.Error(), "zz") || strings.Contains(err.Error(), `"ok"`)) {
			t.Errorf("%s: the error quotes the input: %v", what, err)
		}
	}
	if _, err := arguments("/things?filter="+url.QueryEscape(strictBody), []byte(strictBody)); err != nil {
		t.Fatalf("valid arguments: %v", err)
	}
	for _, v := range hostilejson.Variants([]byte(strictBody)) {
		_, err := arguments("/things", v.Doc)
		refused("body/"+v.Name, err, v.Err)
		_, err = arguments("/things?filter="+url.QueryEscape(string(v.Doc)), []byte(strictBody))
		if !errors.Is(err, ErrBadArguments) {
			t.Errorf("filter/%s: err = %v, want ErrBadArguments", v.Name, err)
		}
		args := append(append([]byte(`{"body":`), v.Doc...), '}')
		_, err = srv.Invoke(context.Background(), invocation("addThing", string(args)))
		refused("Invoke/"+v.Name, err, v.Err)
	}
	// The body that reached an upstream reordered: the guards read name
	// "ok", an upstream matching without case and keeping the first read
	// "evil".
	_, err = arguments("/things", []byte(`{"name":"ok","Name":"evil"}`))
	refused("case-variant name", err, strictjson.ErrDuplicateMember)
	if n := hits.Load(); n != 0 {
		t.Fatalf("the upstream received %d refused calls", n)
	}
}

// TestHostileAnswers: an upstream's JSON answer that strictjson refuses
// for more than its syntax fails the call with ErrUnreadableResponse
// (nothing of it quoted); one that is not JSON at all is text, as before;
// one without end is read to MaxResponseBytes and no further. In raw mode
// the answer is relayed as it came and only its hash recorded.
func TestHostileAnswers(t *testing.T) {
	variants := hostilejson.Variants([]byte(strictBody))
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		kind := strings.TrimPrefix(r.URL.Path, "/answer/")
		switch kind {
		case "endless":
			chunk := bytes.Repeat([]byte(`{"a":[`), 1<<10)
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "not-json":
			_, _ = w.Write([]byte(`{"name":`))
			return
		}
		i, _ := strconv.Atoi(kind)
		_, _ = w.Write(variants[i].Doc)
	}))
	t.Cleanup(api.Close)
	b := mustBuild(t, "strict.yaml", Config{ServerID: "httpbin"}) // the server id invocation names
	base, _ := url.Parse(api.URL)
	srv, err := NewServer(b, Upstream{BaseURL: base, MaxResponseBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	answer := func(ctx context.Context, kind string) (json.RawMessage, error) {
		return srv.Invoke(ctx, invocation("answer", `{"kind":"`+kind+`"}`))
	}
	for i, v := range variants {
		out, err := answer(context.Background(), strconv.Itoa(i))
		switch {
		case v.Err == strictjson.ErrSyntax:
			var o output
			if err != nil || json.Unmarshal(out, &o) != nil || o.Body[0] != '"' {
				t.Errorf("%s: %s, %v; want the body as text", v.Name, out, err)
			}
		case !errors.Is(err, ErrUnreadableResponse) || !errors.Is(err, v.Err):
			t.Errorf("%s: %s, %v; want ErrUnreadableResponse", v.Name, out, err)
		case strings.Contains(err.Error(), "zz") || strings.Contains(err.Error(), `"ok"`):
			t.Errorf("%s: the error quotes the answer: %v", v.Name, err)
		}
		var raw RawResponse
		out, err = answer(WithRawResponse(context.Background(), &raw), strconv.Itoa(i))
		sum := sha256.Sum256(v.Doc)
		if err != nil || !bytes.Equal(raw.Body, v.Doc) || !strings.Contains(string(out), hex.EncodeToString(sum[:])) {
			t.Errorf("%s raw: %s, %v", v.Name, out, err)
		}
	}
	var o output
	if out, err := answer(context.Background(), "not-json"); err != nil || json.Unmarshal(out, &o) != nil || string(o.Body) != `"{\"name\":"` {
		t.Errorf("not JSON: %s, %v; want the body as text", out, err)
	}
	if _, err := answer(context.Background(), "endless"); !errors.Is(err, ErrResponseTooLarge) {
		t.Errorf("endless: %v, want ErrResponseTooLarge", err)
	}
}

// TestCaseVariantParameters: two parameters whose names differ only in
// case get keys that do not (strictjson, and so the dispatcher, refuses
// arguments with two such names), and both reach the upstream as sent.
func TestCaseVariantParameters(t *testing.T) {
	b := mustBuild(t, "strict.yaml", Config{ServerID: "httpbin"}) // the server id invocation names
	got := make(chan url.Values, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.URL.Query() }))
	t.Cleanup(api.Close)
	base, _ := url.Parse(api.URL)
	srv, err := NewServer(b, Upstream{BaseURL: base})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodGet, "/search?id=lower&ID=upper", nil)
	rt, params, err := b.Match(r)
	if err != nil {
		t.Fatal(err)
	}
	args, err := b.Arguments(rt, r, params)
	if err != nil || strictjson.Valid(args) != nil || canonical(t, args) != `{"ID":"upper","query.id":"lower"}` {
		t.Fatalf("arguments %s, %v", args, err)
	}
	if _, err := srv.Invoke(context.Background(), invocation("search", string(args))); err != nil {
		t.Fatal(err)
	}
	if q := <-got; q.Get("id") != "lower" || q.Get("ID") != "upper" {
		t.Fatalf("the upstream got %v", q)
	}
}
