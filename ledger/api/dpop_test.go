package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// TestReadersThatDelegateProvePossession: on the log's read API a read
// token that can delegate (chio.read/*:read,delegate) reads only with a
// proof by its subject key, once per proof and only for the request the
// proof names; the token a delegate rebuilds from its own chain is
// refused whether it is sent as bearer or with the delegate's proof; plain
// read tokens and the service token still read as bearer.
func TestReadersThatDelegateProvePossession(t *testing.T) {
	f := newFixture(t, 6)
	tn := f.tenants
	const path = "/v1/receipts/r-003"
	reader := tn.tokens["reader"]
	readerSigner := tn.signers[reader]
	type want struct {
		status int
		check  string
	}
	check := func(t *testing.T, what string, status int, hdr http.Header, body []byte, w want) {
		t.Helper()
		if status != w.status {
			t.Fatalf("%s: %d %s, want %d", what, status, body, w.status)
		}
		if w.status == 200 {
			if !strings.Contains(string(body), "secret-003") {
				t.Fatalf("%s: %s", what, body)
			}
			return
		}
		var e Error
		if err := json.Unmarshal(body, &e); err != nil || e.Check != w.check || e.Code != "invalid_dpop_proof" ||
			!strings.Contains(e.Error, "dpop "+w.check+":") {
			t.Errorf("%s: body %s, want check %s", what, body, w.check)
		}
		if got := hdr.Values("WWW-Authenticate"); len(got) != 1 || got[0] != dpop.Challenge(dpop.Check(w.check)) {
			t.Errorf("%s: WWW-Authenticate %q", what, got)
		}
		if strings.Contains(string(body), "secret-") {
			t.Errorf("%s: refusal leaks a receipt: %s", what, body)
		}
	}
	bearer := func(token string) func(h http.Header, _ string) {
		return func(h http.Header, _ string) { h.Set("Authorization", "Bearer "+token) }
	}
	withProof := func(token, proof string) func(h http.Header, _ string) {
		return func(h http.Header, _ string) {
			h.Set("Authorization", "DPoP "+token)
			h.Set("DPoP", proof)
		}
	}

	// The delegating reader as bearer: refused, missing proof.
	status, hdr, body := f.do(t, path, bearer(reader))
	check(t, "delegating reader as bearer", status, hdr, body, want{401, "missing_proof"})

	// With a proof by its own key: it reads.
	url := f.srv.URL + path
	proof, err := readerSigner.Proof(http.MethodGet, url)
	if err != nil {
		t.Fatal(err)
	}
	status, hdr, body = f.do(t, path, withProof(reader, proof))
	check(t, "delegating reader with a proof", status, hdr, body, want{200, ""})
	// The same proof again: replayed.
	status, hdr, body = f.do(t, path, withProof(reader, proof))
	check(t, "the same proof again", status, hdr, body, want{401, "replayed"})
	// A proof for another receipt's URL, or another method.
	other, _ := readerSigner.Proof(http.MethodGet, f.srv.URL+"/v1/receipts/r-004")
	status, hdr, body = f.do(t, path, withProof(reader, other))
	check(t, "proof for another URL", status, hdr, body, want{401, "wrong_url"})
	post, _ := readerSigner.Proof(http.MethodPost, url)
	status, hdr, body = f.do(t, path, withProof(reader, post))
	check(t, "proof for another method", status, hdr, body, want{401, "wrong_method"})

	// The delegate rebuilds its parent from its own chain. The reader's
	// child (chio.read/receipts) rebuilds chio.read/*; A1 rebuilds A.
	for _, c := range []struct{ child, parent string }{{"readerChild", "reader"}, {"A1", "A"}} {
		t.Run("rebuilt by "+c.child, func(t *testing.T) {
			var rebuilt string
			if c.child == "A1" {
				rebuilt = tn.rebuilt
			} else {
				rebuilt = dpoptest.Rebuild(t, tn.tokens[c.child])
			}
			if rebuilt != tn.tokens[c.parent] {
				t.Fatalf("the rebuilt token is not %s's", c.parent)
			}
			status, hdr, body := f.do(t, path, bearer(rebuilt))
			check(t, "rebuilt parent as bearer", status, hdr, body, want{401, "missing_proof"})
			status, hdr, body = f.do(t, path, withProof(rebuilt, dpoptest.ForgedProof(t, tn.keys[c.child], rebuilt, http.MethodGet, url)))
			check(t, "rebuilt parent with the delegate's proof", status, hdr, body, want{401, "wrong_key"})
		})
	}

	// Leaf read tokens stay bearer; so does the service token.
	for _, name := range []string{"readerChild", "all", "auditor", "operator"} {
		status, _, body := f.do(t, path, bearer(tn.tokens[name]))
		if status != 200 || !strings.Contains(string(body), "secret-003") {
			t.Errorf("%s as bearer: %d %s", name, status, body)
		}
	}
	// The service token has no key to prove.
	status, hdr, body = f.do(t, path, withProof(operatorToken, dpoptest.ForgedProof(t, tn.keys["reader"], operatorToken, http.MethodGet, url)))
	check(t, "service token with a proof", status, hdr, body, want{401, "malformed"})
}
