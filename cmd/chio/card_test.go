package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/schemas"
)

// chio up signs its agent card with DATA_DIR/keys/card.key; `chio verify
// --agent-card` verifies the served card offline with the JWKS, or through
// the card's jku, and refuses a tampered copy.
func TestVerifyAgentCard(t *testing.T) {
	up := startUp(t)
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(up.dir, "keys", cardKeyFile))
	if err != nil {
		t.Fatalf("chio up wrote no card key: %v", err)
	}
	key, err := schemas.ParsePrivateKey(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	kid := cardsig.KeyID(key.Public().(ed25519.PublicKey))

	dir := t.TempDir()
	code, card := httpGet(t, up.httpURL+"/.well-known/agent-card.json")
	_, jwks := httpGet(t, up.httpURL+cardsig.JWKSPath)
	if code != 200 || !bytes.Contains(card, []byte(`"signatures"`)) || !bytes.Contains(jwks, []byte(kid)) {
		t.Fatalf("HTTP %d card %s\njwks %s", code, card, jwks)
	}
	// Dev mode: tokenless callers act under the dev capability, so the card
	// asks for no security.
	var m map[string]json.RawMessage
	if json.Unmarshal(card, &m) != nil || m["securitySchemes"] != nil || m["securityRequirements"] != nil {
		t.Fatalf("dev-mode card declares security: %s", card)
	}
	cardF, jwksF := filepath.Join(dir, "card.json"), filepath.Join(dir, "jwks.json")
	_ = os.WriteFile(cardF, card, 0o600)
	_ = os.WriteFile(jwksF, jwks, 0o600)
	_, card03 := httpGet(t, up.httpURL+"/.well-known/agent.json")
	card03F := filepath.Join(dir, "card03.json")
	_ = os.WriteFile(card03F, card03, 0o600)

	tamperedF := filepath.Join(dir, "tampered.json")
	_ = os.WriteFile(tamperedF, bytes.Replace(card, []byte(`"streaming":true`), []byte(`"streaming":false`), 1), 0o600)
	otherKey := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{5}, 32))
	other, _ := cardsig.NewSigner(otherKey)
	otherF := filepath.Join(dir, "other-jwks.json")
	_ = os.WriteFile(otherF, other.JWKS(), 0o600)
	unsignedF := filepath.Join(dir, "unsigned.json")
	_ = os.WriteFile(unsignedF, []byte(`{"name":"x"}`), 0o600)

	for _, c := range []struct {
		name string
		args []string
		code int    // 0: verifies
		want string // in the output, or in the error
	}{
		{"offline with the JWKS", []string{"--agent-card", cardF, "--jwks", jwksF}, 0, "verified by key " + kid + " (EdDSA) from " + jwksF},
		{"0.3 card", []string{"--agent-card", card03F, "--jwks", jwksF}, 0, kid},
		{"the served card through its jku", []string{"--agent-card", up.httpURL}, 0, "from " + up.httpURL + cardsig.JWKSPath + " (the card's jku"},
		{"JWKS by URL", []string{"--agent-card", cardF, "--jwks", up.httpURL + cardsig.JWKSPath}, 0, kid},
		{"tampered", []string{"--agent-card", tamperedF, "--jwks", jwksF}, 1, "verify: FAILED agent card: no signature verifies: signature 0: the signature by"},
		{"a file without --jwks", []string{"--agent-card", cardF}, 2, "pass --jwks"},
		{"another key", []string{"--agent-card", cardF, "--jwks", otherF}, 1, "unknown kid"},
		{"unsigned", []string{"--agent-card", unsignedF, "--jwks", jwksF}, 1, "no signatures"},
		{"missing file", []string{"--agent-card", filepath.Join(dir, "nope.json"), "--jwks", jwksF}, 2, "--agent-card"},
		{"bad JWKS", []string{"--agent-card", cardF, "--jwks", unsignedF}, 2, "--jwks"},
		{"mixed with receipt flags", []string{"--agent-card", cardF, "--receipt", cardF}, 2, "drop the receipt flags"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, err := chio(ctx, append([]string{"verify"}, c.args...)...)
			if c.code == 0 {
				if err != nil || !strings.Contains(out, "verify: OK agent card") || !strings.Contains(out, c.want) {
					t.Fatalf("%v\n%s", err, out)
				}
				return
			}
			var ee *exitError
			if !errors.As(err, &ee) || ee.code != c.code || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("want exit %d ~%q, got %v (%s)", c.code, c.want, err, out)
			}
		})
	}
}

// Without --jwks, verify trusts a jku only on the origin the card came
// from, over https or loopback http: a card naming a JWKS elsewhere is
// refused, and that JWKS is never fetched.
func TestVerifyAgentCardJKU(t *testing.T) {
	ctx := context.Background()
	signer, err := cardsig.NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{6}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	// An agent serving its card (signed with jku set per test) and its JWKS,
	// counting the JWKS fetches.
	type agent struct {
		*httptest.Server
		jku        atomic.Value // string
		jwksServed atomic.Int32
	}
	newAgent := func() *agent {
		a := &agent{}
		a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/.well-known/agent-card.json":
				b, err := signer.Sign([]byte(`{"name":"edge"}`), a.jku.Load().(string))
				if err != nil {
					http.Error(w, err.Error(), 500)
					return
				}
				_, _ = w.Write(b)
			case cardsig.JWKSPath:
				a.jwksServed.Add(1)
				_, _ = w.Write(signer.JWKS())
			default:
				http.NotFound(w, r)
			}
		}))
		t.Cleanup(a.Close)
		return a
	}
	edge, evil := newAgent(), newAgent()

	verify := func(card string) (string, error) { return chio(ctx, "verify", "--agent-card", card) }

	// Same origin: verified through the jku.
	edge.jku.Store(edge.URL + cardsig.JWKSPath)
	if out, err := verify(edge.URL); err != nil || !strings.Contains(out, "verify: OK agent card \"edge\"") || !strings.Contains(out, "from "+edge.URL+cardsig.JWKSPath) {
		t.Fatalf("same-origin jku: %v\n%s", err, out)
	}
	// The same origin spelled with its default port made explicit is the
	// same origin; localhost is loopback like 127.0.0.1.
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(edge.URL, "http://"))
	edge.jku.Store("http://localhost:" + port + cardsig.JWKSPath)
	if out, err := verify("http://LOCALHOST:" + port); err != nil || !strings.Contains(out, "verify: OK") {
		t.Fatalf("same origin, other spelling: %v\n%s", err, out)
	}

	refused := func(name, card, want string) {
		t.Helper()
		var ee *exitError
		out, err := verify(card)
		if !errors.As(err, &ee) || ee.code != 1 || !strings.Contains(err.Error(), want) || strings.Contains(out, "verify: OK") {
			t.Fatalf("%s: want exit 1 ~%q, got %v (%s)", name, want, err, out)
		}
	}
	// A jku on another origin (another port of the same host is another
	// origin) is refused unfetched, though its key would verify the card.
	edge.jku.Store(evil.URL + cardsig.JWKSPath)
	refused("foreign-origin jku", edge.URL, "is not on the origin the card came from")
	if n := evil.jwksServed.Load(); n != 0 {
		t.Fatalf("the foreign jku was fetched %d times", n)
	}
	// A jku on the card's own origin that is plain http to a host that is
	// not loopback: refused. The card is fetched from edge.example, which
	// the client resolves to the test server.
	defer func(c *http.Client) { fetchClient = c }(fetchClient)
	fetchClient = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, edge.Listener.Addr().String())
	}}}
	edge.jku.Store("http://edge.example" + cardsig.JWKSPath)
	refused("http jku on a non-loopback host", "http://edge.example", "plain http on a host that is not loopback")
	edge.jku.Store("ftp://edge.example" + cardsig.JWKSPath)
	refused("not http(s)", "http://edge.example", "is not an http(s) URL")
	if n := edge.jwksServed.Load(); n != 2 { // the two accepted above
		t.Fatalf("JWKS fetched %d times, want 2", n)
	}
}

// listenOrigin is the card's own origin only for a concrete listen address.
func TestListenOrigin(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:8080":  "http://127.0.0.1:8080",
		"[::1]:8080":      "http://[::1]:8080",
		"edge.example:80": "http://edge.example:80",
		":8080":           "",
		"0.0.0.0:8080":    "",
		"[::]:8080":       "",
		"127.0.0.1:0":     "", // known once bound: chio up adds it then
		"no port":         "",
	} {
		if got := listenOrigin(addr); got != want {
			t.Errorf("listenOrigin(%q) = %q, want %q", addr, got, want)
		}
	}
}

// Replicas racing to create one card key all end with the same key.
func TestLoadCardKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "card.key")
	keys := make(chan ed25519.PrivateKey, 8)
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			k, err := loadCardKey(path)
			keys <- k
			errs <- err
		}()
	}
	var first ed25519.PrivateKey
	for range 8 {
		k, err := <-keys, <-errs
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = k
		} else if !first.Equal(k) {
			t.Fatal("two replicas hold different card keys")
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi, err)
	}
}
