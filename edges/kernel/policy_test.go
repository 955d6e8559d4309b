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
		"empty hashed key":   `{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{},"record":{"hash_arguments":[""]}}`,
	}
	for name, raw := range cases {
		if _, err := ParsePolicy([]byte(raw)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestRecordedArguments: record.hash_arguments replaces values by their
// SHA-256 (a string's UTF-8 bytes, any other value's JCS) and leaves the
// rest as it was; without it the arguments are recorded as sent.
func TestRecordedArguments(t *testing.T) {
	issuer := pub(issuerKey)
	p, err := ParsePolicy([]byte(`{"schema":"chio.policy.v1","trusted_issuers":["` + issuer + `"],"guards":{},"record":{"hash_arguments":["path","args"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewPolicy(Policy{TrustedIssuers: []string{issuer}})
	if err != nil {
		t.Fatal(err)
	}
	args := []byte(`{"args":["-l","/tmp"],"command":"ls","path":"/w/a.txt"}`)
	cases := []struct {
		name string
		p    *LoadedPolicy
		in   string
		want string
	}{
		{"hashed", p, string(args), `{"args":"sha256:` + schemas.SHA256Hex([]byte(`["-l","/tmp"]`)) + `","command":"ls","path":"sha256:` + schemas.SHA256Hex([]byte("/w/a.txt")) + `"}`},
		{"no such key", p, `{"command":"ls"}`, `{"command":"ls"}`},
		{"no record", plain, string(args), string(args)},
	}
	for _, tc := range cases {
		got, err := tc.p.Recorded([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("%s: %s, %v; want %s", tc.name, got, err, tc.want)
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
