package cardsig

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var (
	key   = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))
	other = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
)

const card = `{"name":"edge","description":"d <&>","version":"1.0.0",` +
	`"supportedInterfaces":[{"url":"https://edge.example.com/a2a","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],` +
	`"capabilities":{"streaming":true,"pushNotifications":false},"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],` +
	`"skills":[{"id":"s","name":"s","description":"é","tags":[]}]}`

func signed(t *testing.T) []byte {
	t.Helper()
	s, err := NewSigner(key)
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Sign([]byte(card), "https://edge.example.com"+JWKSPath)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func keysOf(t *testing.T, jwks []byte) []Key {
	t.Helper()
	ks, err := ParseJWKS(jwks)
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// reorder re-encodes a JSON object with its members in reverse order,
// indented: the same card, not the same bytes.
func reorder(t *testing.T, raw []byte) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var names []string
	for k := range m {
		names = append(names, k)
	}
	var b bytes.Buffer
	b.WriteString("{\n")
	for i := len(names) - 1; i >= 0; i-- {
		k, _ := json.Marshal(names[i])
		b.Write(k)
		b.WriteString(" :  ")
		var v bytes.Buffer
		_ = json.Indent(&v, m[names[i]], "  ", "    ")
		b.Write(v.Bytes())
		if i > 0 {
			b.WriteString(",\n")
		}
	}
	b.WriteString("\n}")
	return b.Bytes()
}

func TestSignVerify(t *testing.T) {
	s, _ := NewSigner(key)
	good := signed(t)
	mine := keysOf(t, s.JWKS())
	theirs := []Key{{KID: s.KID(), Pub: other.Public().(ed25519.PublicKey)}}
	otherSigner, _ := NewSigner(other)

	cases := []struct {
		name string
		card func() []byte
		keys []Key
		want string // error substring; "" verifies
	}{
		{name: "as signed", card: func() []byte { return good }, keys: mine},
		{name: "members reordered and reindented", card: func() []byte { return reorder(t, good) }, keys: mine},
		{name: "escaped differently", card: func() []byte {
			return bytes.Replace(good, []byte(`"description":"é"`), []byte(`"description":"\u00e9"`), 1)
		}, keys: mine},
		{name: "tampered value", card: func() []byte {
			return bytes.Replace(good, []byte("https://edge.example.com/a2a"), []byte("https://evil.example.com/a2a"), 1)
		}, keys: mine, want: "does not match"},
		{name: "member added", card: func() []byte {
			return bytes.Replace(good, []byte(`"name":"edge",`), []byte(`"name":"edge","iconUrl":"x",`), 1)
		}, keys: mine, want: "does not match"},
		{name: "duplicate member", card: func() []byte {
			return bytes.Replace(good, []byte(`"name":"edge",`), []byte(`"name":"edge","name":"evil",`), 1)
		}, keys: mine, want: "Duplicate"},
		{name: "wrong key under the right kid", card: func() []byte { return good }, keys: theirs, want: "does not match"},
		{name: "unknown kid", card: func() []byte { return good }, keys: keysOf(t, otherSigner.JWKS()), want: "unknown kid"},
		{name: "unsigned", card: func() []byte { return []byte(card) }, keys: mine, want: "no signatures"},
		{name: "not an object", card: func() []byte { return []byte(`[1]`) }, keys: mine, want: "not a JSON object"},
		{name: "alg none", card: func() []byte {
			var c map[string]any
			_ = json.Unmarshal(good, &c)
			sig := c["signatures"].([]any)[0].(map[string]any)
			sig["protected"] = b64.EncodeToString([]byte(`{"alg":"none","kid":"` + s.KID() + `"}`))
			out, _ := json.Marshal(c)
			return out
		}, keys: mine, want: `alg "none"`},
		{name: "crit", card: func() []byte {
			var c map[string]any
			_ = json.Unmarshal(good, &c)
			sig := c["signatures"].([]any)[0].(map[string]any)
			sig["protected"] = b64.EncodeToString([]byte(`{"alg":"EdDSA","kid":"` + s.KID() + `","crit":["b64"]}`))
			out, _ := json.Marshal(c)
			return out
		}, keys: mine, want: "critical"},
		{name: "second signature verifies", card: func() []byte {
			var c map[string]any
			_ = json.Unmarshal(good, &c)
			bad := map[string]any{"protected": b64.EncodeToString([]byte(`{"alg":"EdDSA","kid":"gone"}`)), "signature": "AA"}
			c["signatures"] = append([]any{bad}, c["signatures"].([]any)...)
			out, _ := json.Marshal(c)
			return out
		}, keys: mine},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v, err := Verify(c.card(), c.keys)
			if c.want == "" {
				if err != nil || v.Header.KID != s.KID() || v.Header.JKU != "https://edge.example.com"+JWKSPath {
					t.Fatalf("Verify = %+v, %v", v, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Verify err = %v, want ~%q", err, c.want)
			}
		})
	}
}

// The signature covers the card with "signatures" removed, canonicalised:
// the detached payload is exactly JCS(card) for the card as given.
func TestPayloadIsTheCardWithoutSignatures(t *testing.T) {
	good := signed(t)
	p1, err := Payload(good)
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := Payload([]byte(card))
	if !bytes.Equal(p1, p2) || bytes.Contains(p1, []byte("signatures")) {
		t.Fatalf("payload\n%s\n%s", p1, p2)
	}
	if !bytes.HasPrefix(p1, []byte(`{"capabilities":{"pushNotifications":false,"streaming":true},"defaultInputModes"`)) ||
		!bytes.Contains(p1, []byte(`"description":"d <&>"`)) {
		t.Fatalf("not JCS: %s", p1)
	}
	// The signed bytes are the card as given plus one last member.
	if !bytes.HasPrefix(good, []byte(card[:len(card)-1]+`,"signatures":[{"protected":"`)) {
		t.Fatalf("signed card: %s", good)
	}
	sigs, hdrs, err := Signatures(good)
	if err != nil || len(sigs) != 1 || !reflect.DeepEqual(hdrs[0], Header{Alg: "EdDSA", Typ: "JOSE", KID: KeyID(key.Public().(ed25519.PublicKey)), JKU: "https://edge.example.com" + JWKSPath}) {
		t.Fatalf("signatures %+v %+v %v", sigs, hdrs, err)
	}
	// Deterministic: the same key signs the same card with the same bytes.
	if again := signed(t); !bytes.Equal(again, good) {
		t.Fatal("two signatures of one card differ")
	}
	s, _ := NewSigner(key)
	if _, err := s.Sign(good, ""); err == nil || !strings.Contains(err.Error(), "already signed") {
		t.Fatalf("re-signing: %v", err)
	}
	if out, err := s.Sign([]byte(`{}`), ""); err != nil || !bytes.HasPrefix(out, []byte(`{"signatures":[`)) {
		t.Fatalf("empty object: %s %v", out, err)
	}
}

func TestJWKS(t *testing.T) {
	s, _ := NewSigner(key)
	var set struct {
		Keys []map[string]string `json:"keys"`
	}
	if err := json.Unmarshal(s.JWKS(), &set); err != nil || len(set.Keys) != 1 {
		t.Fatalf("%s %v", s.JWKS(), err)
	}
	k := set.Keys[0]
	if k["kty"] != "OKP" || k["crv"] != "Ed25519" || k["use"] != "sig" || k["alg"] != "EdDSA" || k["kid"] != s.KID() || len(k["x"]) != 43 {
		t.Fatalf("jwk %v", k)
	}
	// RFC 8037 appendix A.3: the thumbprint of its example key.
	x, _ := b64.DecodeString("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
	if got := KeyID(x); got != "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k" {
		t.Fatalf("thumbprint %s", got)
	}
	for _, bad := range []string{`{"keys":[]}`, `{"keys":[{"kty":"EC","crv":"P-256","x":"a"}]}`, `{"keys":[{"kty":"OKP","crv":"Ed25519","x":"short"}]}`, `nope`} {
		if _, err := ParseJWKS([]byte(bad)); err == nil {
			t.Errorf("ParseJWKS(%s) accepted", bad)
		}
	}
	if _, err := NewSigner(ed25519.PrivateKey{1}); err == nil {
		t.Error("short key accepted")
	}
}
