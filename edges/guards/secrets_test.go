package guards

import (
	"encoding/json"
	"strings"
	"testing"
)

// Test secrets are assembled at run time so that no scanner mistakes this
// file for a leak.
func fake(parts ...string) string { return strings.Join(parts, "") }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestSecretLeakGuard(t *testing.T) {
	g, err := NewSecretLeakGuard(SecretLeakConfig{})
	if err != nil {
		t.Fatal(err)
	}
	alnum36 := strings.Repeat("aB3dE6", 6)
	secrets := []struct {
		name, secret, kind string
	}{
		{"aws", fake("AKIA", "IOSFODNN7EXAMPLE"), kindAWS},
		{"aws session", fake("ASIA", "Z7Q2W3E4R5T6Y7U8"), kindAWS},
		{"aws in text", fake("key=AKIA", "IOSFODNN7EXAMPLE;"), kindAWS},
		{"github pat classic", fake("ghp", "_", alnum36), kindGitHub},
		{"github oauth", fake("gho", "_", alnum36, "xyz"), kindGitHub},
		{"github server", fake("ghs", "_", alnum36), kindGitHub},
		{"github fine-grained", fake("github", "_pat_", "11ABCDEFG0123456789_", alnum36), kindGitHub},
		{"github bearer", fake("Bearer ghu", "_", alnum36), kindGitHub},
		{"slack bot", fake("xox", "b-1234567890-abcdefghij"), kindSlack},
		{"slack user", fake("xox", "p-12345-67890-abcdef"), kindSlack},
		{"stripe secret", fake("sk", "_live_", "51HxYzABCDEFGH1234567890"), kindStripe},
		{"stripe restricted", fake("rk", "_live_", "51HxYzABCDEFGH1234567890"), kindStripe},
		{"openai", fake("sk", "-", "proj-Ab12Cd34Ef56Gh78Ij90KlMn"), kindSKKey},
		{"openai legacy", fake("sk", "-", "1234567890abcdefghijklmnop"), kindSKKey},
		{"anthropic", fake("sk", "-ant-", "api03-Ab12Cd34Ef56Gh78Ij90KlMnOp"), kindAnthropic},
		{"google", fake("AIza", "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q"), kindGoogle},
		{"pem rsa", fake("-----BEGIN RSA ", "PRIVATE KEY-----\nMIIEow"), kindPEM},
		{"pem pkcs8", fake("-----BEGIN ", "PRIVATE KEY-----"), kindPEM},
		{"pem openssh", fake("xx -----BEGIN OPENSSH ", "PRIVATE KEY----- yy"), kindPEM},
		{"pgp", fake("-----BEGIN PGP ", "PRIVATE KEY BLOCK-----"), kindPEM},
		{"jwt", fake("eyJ", "hbGciOiJIUzI1NiJ9.eyJ", "zdWIiOiIxMjM0In0.c2lnbmF0dXJlX2J5dGVz"), kindJWT},
		{"jwt unsigned", fake("eyJ", "hbGciOiJub25lIn0.eyJ", "zdWIiOiIxIn0."), kindJWT},
	}
	for _, tt := range secrets {
		t.Run(tt.name, func(t *testing.T) {
			for _, args := range []struct{ doc, ptr string }{
				{`{"headers":{"Authorization":` + jsonString(tt.secret) + `}}`, "/headers/Authorization: " + tt.kind},
				{`{"a":[1,{"b":` + jsonString(tt.secret) + `}]}`, "/a/1/b: " + tt.kind},
				{`{"env":{` + jsonString(tt.secret) + `:"x"}}`, "/env: " + tt.kind + " in an object key"},
				{jsonString(tt.secret), "(root): " + tt.kind},
			} {
				r := checkArgs(t, g, args.doc)
				if r.Allow || r.Details != args.ptr {
					t.Errorf("args %s: got %+v, want details %q", args.doc, r, args.ptr)
				}
				assertNoSecret(t, r.Details, tt.secret)
			}
		})
	}

	clean := []string{
		`{"query":"hello world","limit":10}`,
		`{"text":"AKIA is a prefix; AKIAshort; xAKIAIOSFODNN7EXAMPLE"}`,
		`{"text":"risk-assessment-for-quarterly-review-2024"}`,
		`{"text":"task: sk-learn-tutorial-for-beginners"}`,
		`{"text":"ghp_short","slug":"github_pat_x"}`,
		`{"text":"xoxb-short"}`,
		`{"text":"sk_test_51HxYzABCDEFGH1234567890"}`,
		`{"text":"-----BEGIN PUBLIC KEY-----"}`,
		`{"text":"-----BEGIN CERTIFICATE-----"}`,
		`{"text":"eyJhbGciOiJIUzI1NiJ9 alone"}`,
		`{"text":"AIzaShort"}`,
		`{"n":12345678901234567890,"b":true,"z":null}`,
	}
	for _, doc := range clean {
		if r := checkArgs(t, g, doc); !r.Allow || r.Details != "" {
			t.Errorf("args %s: got %+v, want allow", doc, r)
		}
	}
}

// assertNoSecret fails if details hold any 6-byte piece of the secret
// beyond its public prefix.
func assertNoSecret(t *testing.T, details, secret string) {
	t.Helper()
	for i := 4; i+6 <= len(secret); i++ {
		if piece := secret[i : i+6]; strings.Contains(details, piece) {
			t.Errorf("details %q hold %q of the secret", details, piece)
			return
		}
	}
}

func TestSecretLeakDetailsRedactKeys(t *testing.T) {
	g, err := NewSecretLeakGuard(SecretLeakConfig{ExtraPatterns: []string{`internal-[0-9]{6}`}})
	if err != nil {
		t.Fatal(err)
	}
	secret := fake("AKIA", "IOSFODNN7EXAMPLE")
	// The AWS key is in a key above the value the extra pattern flags:
	// the key is reported first, and never as part of a pointer.
	doc := `{"` + secret + `":{"v":"internal-123456"}}`
	r := checkArgs(t, g, doc)
	if r.Allow || r.Details != "(root): "+kindAWS+" in an object key" {
		t.Errorf("got %+v", r)
	}
	assertNoSecret(t, r.Details, secret)

	// Another guard's pointer through a secret-looking key is redacted.
	eg, err := NewEgressGuard(EgressConfig{})
	if err != nil {
		t.Fatal(err)
	}
	r = checkArgs(t, eg, `{"`+secret+`":{"u":"https://localhost/"}}`)
	if r.Allow || r.Details != "/<redacted>/u: loopback host name" {
		t.Errorf("got %+v", r)
	}
	// Long keys are shortened.
	long := strings.Repeat("k", 5000)
	r = checkArgs(t, eg, `{"`+long+`":"https://localhost/"}`)
	if r.Allow || len(r.Details) > 200 || !strings.Contains(r.Details, "…") {
		t.Errorf("got %+v", r)
	}
}

func TestSecretLeakExtraPatterns(t *testing.T) {
	g, err := NewSecretLeakGuard(SecretLeakConfig{ExtraPatterns: []string{`corp_[a-f0-9]{8}`, `(?i)password\s*=`}})
	if err != nil {
		t.Fatal(err)
	}
	r := checkArgs(t, g, `{"cfg":"token corp_deadbeef here"}`)
	if r.Allow || r.Details != "/cfg: extra[0]" {
		t.Errorf("got %+v", r)
	}
	assertNoSecret(t, r.Details, "corp_deadbeef")
	r = checkArgs(t, g, `{"cfg":"PassWord = hunter2"}`)
	if r.Allow || r.Details != "/cfg: extra[1]" {
		t.Errorf("got %+v", r)
	}
	if r := checkArgs(t, g, `{"cfg":"corp_xyz"}`); !r.Allow {
		t.Errorf("got %+v", r)
	}
	for _, bad := range [][]string{{""}, {"a("}, {"a*"}, {`(a)\1`}, {strings.Repeat("a", MaxExtraPattern+1)}} {
		if _, err := NewSecretLeakGuard(SecretLeakConfig{ExtraPatterns: bad}); err == nil || !strings.HasPrefix(err.Error(), "secret leak guard: extra[0]") {
			t.Errorf("extra %q: error %v", bad, err)
		}
	}
	if g.Name() != "SecretLeakGuard" {
		t.Errorf("Name = %q", g.Name())
	}
}
