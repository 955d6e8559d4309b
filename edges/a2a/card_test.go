package a2a

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/a2aproject/a2a-go/v2/a2acompat/a2av0"
	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

var cardKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{9}, 32))

// getCard GETs path on base with the given request headers.
func getCard(t *testing.T, base, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	return getCardAs(t, base, "", path, hdr...)
}

func members(t *testing.T, raw []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	return m
}

// The members of the 1.0 AgentCard and AgentSkill: nothing else may
// appear in a 1.0 card (the schema's additionalProperties is false). The
// schema itself is checked in wire's TestAgentCard10Schema.
var (
	card10Members  = "name description version provider documentationUrl iconUrl supportedInterfaces capabilities securitySchemes securityRequirements defaultInputModes defaultOutputModes skills signatures"
	skill10Members = "id name description tags examples inputModes outputModes securityRequirements"
)

func only(t *testing.T, what string, m map[string]json.RawMessage, allowed string) {
	t.Helper()
	ok := map[string]bool{}
	for _, f := range strings.Fields(allowed) {
		ok[f] = true
	}
	for k := range m {
		if !ok[k] {
			t.Errorf("%s has member %q", what, k)
		}
	}
}

func check10(t *testing.T, raw []byte) {
	t.Helper()
	m := members(t, raw)
	only(t, "1.0 card", m, card10Members)
	var skills []map[string]json.RawMessage
	_ = json.Unmarshal(m["skills"], &skills)
	for _, s := range skills {
		only(t, "1.0 skill", s, skill10Members)
	}
}

// Which card a request gets: 1.0 clients fetch agent-card.json without
// A2A-Version, so that is the 1.0 card; A2A-Version 0.3 (header or query),
// the pre-1.0 agent.json path and the 0.3 REST card route give the
// 0.3-compatible one.
func TestCardDialects(t *testing.T) {
	cl := startCluster(t, 1, "")
	base := cl.edges[0].URL
	cases := []struct {
		name, path string
		hdr        []string
		want       wire.Version
	}{
		{"well-known, no version", cardPath, nil, wire.V10},
		{"well-known, 1.0", cardPath, []string{"A2A-Version", "1.0"}, wire.V10},
		{"well-known, 0.3 header", cardPath, []string{"A2A-Version", "0.3"}, wire.V03},
		{"well-known, 0.3.0 header", cardPath, []string{"A2A-Version", "0.3.0"}, wire.V03},
		{"well-known, 0.3 query", cardPath + "?A2A-Version=0.3", nil, wire.V03},
		{"well-known, unknown version", cardPath, []string{"A2A-Version", "99.0"}, wire.V10},
		{"agent.json", legacyCardPath, nil, wire.V03},
		{"agent.json, 1.0", legacyCardPath, []string{"A2A-Version", "1.0"}, wire.V10},
		{"GET the JSON-RPC URL", "/a2a", nil, wire.V03},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := getCard(t, base, c.path, c.hdr...)
			if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Vary"), "A2A-Version") {
				t.Fatalf("HTTP %d, Vary %q", resp.StatusCode, resp.Header.Get("Vary"))
			}
			m := members(t, body)
			_, has03 := m["protocolVersion"]
			if c.want == wire.V10 {
				check10(t, body)
				return
			}
			if !has03 || !bytes.Equal(m["url"], []byte(`"`+base+`/a2a"`)) || !bytes.Equal(m["preferredTransport"], []byte(`"JSONRPC"`)) ||
				m["supportedInterfaces"] == nil || m["security"] == nil {
				t.Fatalf("0.3 card: %s", body)
			}
		})
	}
}

// Security is declared only when it is enforced: a dev-mode edge (callers
// without a token act under the dev capability) and the stdio card declare
// none, in either dialect.
func TestCardSecurityOnlyWhenEnforced(t *testing.T) {
	for _, dev := range []bool{false, true} {
		devToken := ""
		if dev {
			devToken = token(t, agentKey, "cap-dev-card")
		}
		cl := startCluster(t, 1, devToken)
		for _, hdr := range [][]string{nil, {"A2A-Version", "0.3"}} {
			_, body := getCard(t, cl.edges[0].URL, cardPath, hdr...)
			m := members(t, body)
			for _, k := range []string{"securitySchemes", "securityRequirements", "security"} {
				_, ok := m[k]
				want := !dev && (k != "security" || len(hdr) > 0) // "security" is 0.3's
				if ok != want {
					t.Errorf("dev %v, %v: %s present %v:\n%s", dev, hdr, k, ok, body)
				}
			}
		}
		for _, enc := range []func(*wire.AgentCard) ([]byte, error){wire.EncodeAgentCard, wire.EncodeAgentCard10} {
			b, _ := enc(cl.raw[0].StdioCard())
			if bytes.Contains(b, []byte("security")) {
				t.Errorf("stdio card declares security: %s", b)
			}
		}
	}
}

// The HTTP card says the edge streams; the stdio card keeps the
// deferred, collated caveats of Chio's stdio profile.
func TestCardFidelityPerProfile(t *testing.T) {
	cl := startCluster(t, 1, "")
	rating := func(c *wire.AgentCard) *wire.BridgeFidelity {
		for _, s := range c.Skills {
			if s.ID == "hello_task" {
				return s.BridgeFidelity
			}
		}
		t.Fatal("no hello_task")
		return nil
	}
	http := strings.Join(rating(cl.raw[0].Card("http://x")).Caveats, "\n")
	if !strings.Contains(http, "delivered incrementally") || !strings.Contains(http, "SSE") || strings.Contains(http, "task/get") || strings.Contains(http, "collated") {
		t.Errorf("HTTP caveats:\n%s", http)
	}
	stdio := strings.Join(rating(cl.raw[0].StdioCard()).Caveats, "\n")
	if !strings.Contains(stdio, "follow-up 'task/get'") || !strings.Contains(stdio, "collated") {
		t.Errorf("stdio caveats:\n%s", stdio)
	}
	// In the 1.0 card the ratings ride in the bridge-fidelity extension.
	_, body := getCard(t, cl.edges[0].URL, cardPath)
	var card struct {
		Capabilities struct {
			Extensions []struct {
				URI    string `json:"uri"`
				Params struct {
					BridgeFidelity map[string]wire.BridgeFidelity `json:"bridgeFidelity"`
				} `json:"params"`
			} `json:"extensions"`
		} `json:"capabilities"`
	}
	_ = json.Unmarshal(body, &card)
	i := slices.IndexFunc(card.Capabilities.Extensions, func(x struct {
		URI    string `json:"uri"`
		Params struct {
			BridgeFidelity map[string]wire.BridgeFidelity `json:"bridgeFidelity"`
		} `json:"params"`
	}) bool {
		return x.URI == wire.BridgeFidelityExtension
	})
	if i < 0 || !strings.Contains(strings.Join(card.Capabilities.Extensions[i].Params.BridgeFidelity["hello_task"].Caveats, "\n"), "delivered incrementally") {
		t.Errorf("1.0 card extension: %s", body)
	}
}

// ETag and Last-Modified, and the conditional requests they answer.
func TestCardValidators(t *testing.T) {
	modified := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cl := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.CardModified = modified.Add(300 * time.Millisecond) })
	base := cl.edges[0].URL
	resp, _ := getCard(t, base, cardPath)
	etag, lm := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if etag == "" || lm != "Fri, 02 Jan 2026 03:04:05 GMT" || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age") {
		t.Fatalf("validators %q %q %q", etag, lm, resp.Header.Get("Cache-Control"))
	}
	resp03, _ := getCard(t, base, cardPath, "A2A-Version", "0.3")
	if resp03.Header.Get("ETag") == etag {
		t.Fatal("the two dialects share an ETag")
	}
	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"If-None-Match", []string{"If-None-Match", etag}, http.StatusNotModified},
		{"If-None-Match weak, in a list", []string{"If-None-Match", `"x", W/` + etag}, http.StatusNotModified},
		{"If-None-Match other", []string{"If-None-Match", `"x"`}, http.StatusOK},
		{"If-Modified-Since same", []string{"If-Modified-Since", lm}, http.StatusNotModified},
		{"If-Modified-Since later", []string{"If-Modified-Since", modified.Add(time.Hour).Format(http.TimeFormat)}, http.StatusNotModified},
		{"If-Modified-Since earlier", []string{"If-Modified-Since", modified.Add(-time.Second).Format(http.TimeFormat)}, http.StatusOK},
		{"If-Modified-Since garbage", []string{"If-Modified-Since", "yesterday"}, http.StatusOK},
		{"If-None-Match wins", []string{"If-None-Match", `"x"`, "If-Modified-Since", lm}, http.StatusOK},
		{"the 0.3 ETag does not match the 1.0 card", []string{"If-None-Match", resp03.Header.Get("ETag")}, http.StatusOK},
	} {
		resp, body := getCard(t, base, cardPath, c.hdr...)
		if resp.StatusCode != c.want || (c.want == http.StatusNotModified && len(body) != 0) {
			t.Errorf("%s: HTTP %d (%d bytes)", c.name, resp.StatusCode, len(body))
		}
		if resp.Header.Get("ETag") != etag || resp.Header.Get("Last-Modified") != lm {
			t.Errorf("%s: validators %q %q", c.name, resp.Header.Get("ETag"), resp.Header.Get("Last-Modified"))
		}
	}
}

// getCardAs GETs path on base with the request's Host set to host.
func getCardAs(t *testing.T, base, host, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+path, nil)
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

// extendedCardRaw asks url's JSON-RPC binding for the extended card (1.0)
// with capability tok and returns the result as sent.
func extendedCardRaw(t *testing.T, url, tok string) json.RawMessage {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/a2a", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"GetExtendedAgentCard"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("A2A-Version", "1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  any             `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.Result == nil {
		t.Fatalf("GetExtendedAgentCard: %v %+v", err, m.Error)
	}
	return m.Result
}

// A signed card: the card for the edge's own origin (Config.PublicURL) is
// signed, every replica sharing the key serves the same bytes for it, the
// signature verifies against the JWKS the edge serves at the jku, and both
// a2a-go card parsers read the signed card. A card for any other origin a
// request names (its Host) is served unsigned: the key never vouches for
// URLs a client chose. The extended card likewise.
func TestSignedCard(t *testing.T) {
	// The own origin is a listener bound before the edges are built, so
	// that Config.PublicURL can name it; replica 0 serves on it too.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ownHost := ln.Addr().String()
	own := "http://" + ownHost
	cl := startCluster(t, 2, "", func(c *Config, _ jetstream.JetStream) { c.CardKey = cardKey; c.PublicURL = own + "/" })
	ec := echo.New()
	cl.raw[0].Register(ec, HTTPConfig{ServeRoot: true})
	ownSrv := httptest.NewUnstartedServer(ec)
	ownSrv.Listener.Close()
	ownSrv.Listener = ln
	ownSrv.Start()
	t.Cleanup(ownSrv.Close)

	jresp, jwks := getCard(t, own, cardsig.JWKSPath)
	keys, err := cardsig.ParseJWKS(jwks)
	if jresp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("JWKS: HTTP %d %v %s", jresp.StatusCode, err, jwks)
	}
	for _, hdr := range [][]string{nil, {"A2A-Version", "0.3"}} {
		var first []byte
		// Replica 0 at the own origin; replica 1 asked with the own Host.
		for i, base := range []string{own, cl.edges[1].URL} {
			resp, body := getCardAs(t, base, ownHost, cardPath, hdr...)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("HTTP %d", resp.StatusCode)
			}
			if len(hdr) == 0 {
				check10(t, body)
			}
			sigs, hdrs, err := cardsig.Signatures(body)
			if err != nil || len(sigs) != 1 || hdrs[0].JKU != own+cardsig.JWKSPath || hdrs[0].Alg != "EdDSA" || hdrs[0].Typ != "JOSE" {
				t.Fatalf("signatures %+v %+v %v", sigs, hdrs, err)
			}
			v, err := cardsig.Verify(body, keys)
			if err != nil || v.Header.KID != cardsig.KeyID(cardKey.Public().(ed25519.PublicKey)) {
				t.Fatalf("verify: %+v %v", v, err)
			}
			// The ETag covers the signed bytes.
			if resp.Header.Get("ETag") == "" {
				t.Fatal("no ETag")
			}
			tampered := bytes.Replace(body, []byte(`"streaming":true`), []byte(`"streaming":false`), 1)
			if _, err := cardsig.Verify(tampered, keys); err == nil {
				t.Fatal("a tampered card verifies")
			}
			// Same origin, same key: the same signed card from either replica.
			if i == 0 {
				first = body
			} else if !bytes.Equal(first, body) {
				t.Fatalf("replicas disagree:\n%s\n%s", first, body)
			}
		}
		// Another origin: the request's Host (the replica's own test
		// server address, or one a client made up) gets its card, unsigned.
		for _, host := range []string{strings.TrimPrefix(cl.edges[0].URL, "http://"), "evil.example"} {
			resp, body := getCardAs(t, cl.edges[0].URL, host, cardPath, hdr...)
			if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("http://"+host+"/a2a")) {
				t.Fatalf("Host %s: HTTP %d %s", host, resp.StatusCode, body)
			}
			if _, ok := members(t, body)["signatures"]; ok {
				t.Fatalf("Host %s: the card for a foreign origin is signed:\n%s", host, body)
			}
		}
	}

	// A client cycling Hosts fills only the bounded cache of foreign
	// cards; the own origin's stay.
	for i := range maxCachedCards + 5 {
		getCardAs(t, cl.edges[0].URL, fmt.Sprintf("h%d.example", i), cardPath)
	}
	e0 := cl.raw[0]
	e0.cards.mu.Lock()
	nForeign, nOwn := len(e0.cards.entries), len(e0.cards.own)
	e0.cards.mu.Unlock()
	if nForeign > maxCachedCards || nOwn != 2 { // the own origin in two dialects
		t.Fatalf("cache: %d foreign, %d own", nForeign, nOwn)
	}

	// The extended card: signed at the own origin, unsigned at another.
	tok := narrowToken(t, "cap-signed-ext")
	ext := extendedCardRaw(t, own, tok)
	if v, err := cardsig.Verify(ext, keys); err != nil || v.Header.JKU != own+cardsig.JWKSPath {
		t.Fatalf("extended card at the own origin: %+v %v\n%s", v, err, ext)
	}
	if ext := extendedCardRaw(t, cl.edges[0].URL, tok); bytes.Contains(ext, []byte(`"signatures"`)) {
		t.Fatalf("extended card for a foreign origin is signed:\n%s", ext)
	}

	ctx := context.Background()
	c10, err := agentcard.DefaultResolver.Resolve(ctx, own)
	if err != nil || len(c10.Signatures) != 1 || len(c10.SupportedInterfaces) == 0 {
		t.Fatalf("a2a-go v2 resolver: %+v %v", c10, err)
	}
	c03, err := (&agentcard.Resolver{CardParser: a2av0.NewAgentCardParser()}).Resolve(ctx, own)
	if err != nil || len(c03.Signatures) != 1 {
		t.Fatalf("a2a-go 0.3 parser: %+v %v", c03, err)
	}

	// An origin known only once bound (AddOrigin): signed from then on.
	late := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.CardKey = cardKey })
	if _, body := getCard(t, late.edges[0].URL, cardPath); bytes.Contains(body, []byte(`"signatures"`)) {
		t.Fatal("an edge without a public URL signed a card")
	}
	late.raw[0].AddOrigin(late.edges[0].URL)
	if _, body := getCard(t, late.edges[0].URL, cardPath); !bytes.Contains(body, []byte(`"signatures"`)) {
		t.Fatalf("the added origin's card is unsigned: %s", body)
	}

	// Without a key: unsigned, and no JWKS.
	plain := startCluster(t, 1, "")
	_, body := getCard(t, plain.edges[0].URL, cardPath)
	if _, ok := members(t, body)["signatures"]; ok {
		t.Fatal("unsigned edge signed its card")
	}
	if resp, _ := getCard(t, plain.edges[0].URL, cardsig.JWKSPath); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("JWKS without a key: HTTP %d", resp.StatusCode)
	}
}

// CardDialect V03 serves the 0.3-compatible card to requests that name no
// version, for deployments whose 0.3 clients cannot send one.
func TestCardDialectConfigured(t *testing.T) {
	cl := startCluster(t, 1, "", func(c *Config, _ jetstream.JetStream) { c.CardDialect = wire.V03 })
	_, body := getCard(t, cl.edges[0].URL, cardPath)
	if _, ok := members(t, body)["protocolVersion"]; !ok {
		t.Fatalf("0.3 default: %s", body)
	}
	_, body = getCard(t, cl.edges[0].URL, cardPath, "A2A-Version", "1.0")
	check10(t, body)
}
