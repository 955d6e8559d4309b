package kernel

import (
	"os"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

func TestExamplePolicy(t *testing.T) {
	p, err := LoadPolicy("testdata/policy.example.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile("testdata/policy.example.json")
	canon, _ := schemas.CanonicalizeJSON(raw)
	if p.Hash != schemas.SHA256Hex(canon) || len(p.Hash) != 64 {
		t.Fatalf("policy_hash %s is not SHA-256 of the JCS", p.Hash)
	}
	// Formatting does not change the hash; content does.
	compact, _ := schemas.CanonicalizeJSON(raw)
	again, err := ParsePolicy(compact)
	if err != nil || again.Hash != p.Hash {
		t.Fatalf("reformatted policy hashes differently: %v", err)
	}
	changed, err := ParsePolicy([]byte(strings.Replace(string(raw), `"max_calls": 600`, `"max_calls": 601`, 1)))
	if err != nil || changed.Hash == p.Hash {
		t.Fatalf("a changed policy kept its hash: %v", err)
	}
	if e := p.ToolExposure("a2a", false); e.Tier != "partner" || e.ExposeAll || e.InternalPrefixes[0] != "ops." {
		t.Fatalf("exposure %+v", e)
	}
	if gs, err := p.statelessGuards(); err != nil || len(gs) != 4 {
		t.Fatalf("pipeline: %d guards, %v", len(gs), err)
	}
}

func TestBadPolicies(t *testing.T) {
	issuer := pub(issuerKey)
	cases := map[string]string{
		"not json":           `{`,
		"wrong schema":       `{"schema":"chio.policy.v2","trusted_issuers":["` + issuer + `"],"guards":{}}`,
		"no issuers":         `{"schema":"chio.policy.v1","trusted_issuers":[],"guards":{}}`,
		"bad issuer key":     `{"schema":"chio.policy.v1","trusted_issuers":["abc"],"guards":{}}`,
		"unknown field":      `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{},"allow_all":true}`,
		"misspelt guard":     `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{"egres":{}}}`,
		"skew too large":     `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"clock_skew_seconds":301,"guards":{}}`,
		"zero velocity":      `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{"velocity":{"max_calls":0,"window_seconds":1}}}`,
		"disable constraint": `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{"disable":["ConstraintGuard"]}}`,
		"bad secret pattern": `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{"secret_leak":{"extra_patterns":["("]}}}`,
		"trailing data":      `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{}} {}`,
	}
	for name, raw := range cases {
		if _, err := ParsePolicy([]byte(raw)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	raw, err := os.ReadFile("testdata/policy.example.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(raw)
	f.Add([]byte(`{"schema":"chio.policy.v1","trusted_issuers":["` + pub(issuerKey) + `"],"guards":{"disable":["PathGuard"]}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := ParsePolicy(raw)
		if err != nil {
			return
		}
		// An accepted policy builds its pipeline and has a stable hash.
		if _, err := p.statelessGuards(); err != nil {
			t.Fatalf("accepted policy cannot build its guards: %v", err)
		}
		again, err := ParsePolicy(raw)
		if err != nil || again.Hash != p.Hash {
			t.Fatal("hash is not deterministic")
		}
	})
}
