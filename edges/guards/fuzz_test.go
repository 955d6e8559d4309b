package guards

import (
	"github.com/chio-ledger/chio/schemas/strictjson"

	"context"
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/chio-ledger/chio/schemas"
)

// FuzzConstraints compiles random constraints and checks random arguments
// with them: compile errors are fine, panics and oversized details are not.
func FuzzConstraints(f *testing.F) {
	seeds := []struct{ typ, value, args string }{
		{"exact", `{"pointer":"/mode","equals":{"a":[1,2.0,"x",null,true]}}`, `{"mode":{"a":[1,2,"x",null,true]}}`},
		{"one_of", `{"pointer":"/r","values":["eu",1e2,false]}`, `{"r":100}`},
		{"prefix", `{"pointer":"/a~1b/0","prefix":"docs/"}`, `{"a/b":["docs/x"]}`},
		{"regex", `{"pointer":"","pattern":"^https://[a-z]+$"}`, `"https://x"`},
		{"max", `{"pointer":"/n","max":-1.5e-3}`, `{"n":-0.0016}`},
		{"max_length", `{"pointer":"/q","max_length":3}`, `{"q":"héllo"}`},
		{"seller_exact", `{"seller":"x"}`, `{}`},
	}
	for _, s := range seeds {
		f.Add(s.typ, []byte(s.value), []byte(s.args))
	}
	f.Fuzz(func(t *testing.T, typ string, value, args []byte) {
		set, err := CompileConstraints([]schemas.Constraint{{Type: typ, Value: value}})
		if err != nil {
			return
		}
		v, err := strictjson.Parse(args)
		if err == nil {
			r := set.Check(v)
			checkResult(t, r)
			if r2 := set.Check(v); r2 != r {
				t.Fatalf("Check is not deterministic: %+v then %+v", r, r2)
			}
		}
		r, err := NewConstraintGuard().Check(context.Background(), &Call{Arguments: args, Constraints: set})
		if err == nil {
			checkResult(t, r)
		}
	})
}

// FuzzGuards runs random arguments through every guard, with default and
// with restrictive configurations, calling Check directly so that a panic
// is not hidden by Run's recover.
func FuzzGuards(f *testing.F) {
	for _, s := range []string{
		`{"path":"docs/readme.md","url":"https://api.example.com/v1","query":"hello world","limit":10}`,
		`{"paths":["../x","/etc/shadow",["~/.ssh/id_rsa"]],"file":"file:///proc/1/%2e%2e/x"}`,
		`{"u":["http://[::ffff:127.0.0.1]/","https://0x7f.1/","https://a.internal."],"v":{"w":"ftp://x"}}`,
		`{"AKIAIOSFODNN7EXAMPLE":{"k":"-----BEGIN RSA PRIVATE KEY-----"},"t":"eyJa.eyJb.c"}`,
		`{"u":["\u0001https://169.254.169.254/","ht\ttps://10.0.0.1/","https:169.254.169.254/latest","https:\\\\169.254.169.254\\x"]}`,
		`{"u":["https:/\\evil.example/","//169.254.169.254/x","\\\\h\\x","// note","ratio 1:2","C:\\Users\\x"]}`,
		`{"path":["file:/etc/shadow","FILE:/etc/passwd","file:%2Fetc%2Fshadow","file://etc/shadow#x","fi\tle:x"]}`,
		`{"a":1,"a":2}`, `[`, `"x"`, `null`,
	} {
		f.Add([]byte(s))
	}
	var guards []Guard
	add := func(g Guard, err error) {
		if err != nil {
			f.Fatal(err)
		}
		guards = append(guards, g)
	}
	add(NewPathGuard(PathConfig{}))
	add(NewPathGuard(PathConfig{AllowedRoots: []string{"/workspace", "."}, Forbidden: []string{"**/*.pem", "a/**/b/**/c"}}))
	add(NewEgressGuard(EgressConfig{}))
	add(NewEgressGuard(EgressConfig{AllowedSchemes: []string{"http", "https"}, AllowedHosts: []string{"*.example.com", "::1"}, AllowPrivate: true}))
	add(NewSecretLeakGuard(SecretLeakConfig{}))
	add(NewSecretLeakGuard(SecretLeakConfig{ExtraPatterns: []string{`corp_[0-9a-f]{8}`, `(?i)pass(word)?=`}}))
	cs, err := CompileConstraints([]schemas.Constraint{
		{Type: "max_length", Value: json.RawMessage(`{"pointer":"/query","max_length":64}`)},
		{Type: "regex", Value: json.RawMessage(`{"pointer":"/path","pattern":"[a-z/._]*"}`)},
	})
	if err != nil {
		f.Fatal(err)
	}
	guards = append(guards, NewConstraintGuard())
	ctx := context.Background()

	f.Fuzz(func(t *testing.T, args []byte) {
		_, decodeErr := strictjson.Parse(args)
		for _, g := range guards {
			r, err := g.Check(ctx, &Call{Arguments: args, Constraints: cs})
			if (err != nil) != (decodeErr != nil) {
				t.Fatalf("%s: error %v, decode error %v", g.Name(), err, decodeErr)
			}
			if err != nil {
				continue
			}
			checkResult(t, r)
			// A fresh call decodes and walks in another map order: the
			// verdict and the details must not change.
			r2, err := g.Check(ctx, &Call{Arguments: args, Constraints: cs})
			if err != nil || r2 != r {
				t.Fatalf("%s is not deterministic: %+v then %+v (%v)", g.Name(), r, r2, err)
			}
		}
		ev, _, _ := Run(ctx, guards, &Call{Arguments: args, Constraints: cs})
		for _, e := range ev {
			if e.GuardName == "" || len(e.Details) > MaxDetails || !utf8.ValidString(e.Details) {
				t.Fatalf("bad evidence %+v", e)
			}
		}
	})
}

func checkResult(t *testing.T, r Result) {
	t.Helper()
	if !r.Allow && r.Details == "" {
		t.Fatal("deny without details")
	}
	if len(r.Details) > MaxDetails || !utf8.ValidString(r.Details) {
		t.Fatalf("details: %d bytes, valid UTF-8 %v", len(r.Details), utf8.ValidString(r.Details))
	}
}

// FuzzEgressPreprocessing checks the WHATWG preprocessing: a tab, CR or
// LF anywhere, or a C0 control or space before or after, must not change
// the egress verdict, since a WHATWG parser drops them.
func FuzzEgressPreprocessing(f *testing.F) {
	for _, s := range []string{
		"https://api.example.com/v1", "https:169.254.169.254/x", `https:/\evil.example`,
		"//169.254.169.254/x", `\\h\x`, "note: see docs", "// TODO: x", "ftp://a.b", "file:/etc/passwd",
	} {
		f.Add(s, uint(3), byte('\t'))
	}
	var gs []*egressGuard
	for _, cfg := range []EgressConfig{
		{AllowedHosts: []string{"api.example.com"}},
		{AllowedSchemes: []string{"http", "https", "ws"}, AllowPrivate: true},
	} {
		g, err := NewEgressGuard(cfg)
		if err != nil {
			f.Fatal(err)
		}
		gs = append(gs, g.(*egressGuard))
	}
	f.Fuzz(func(t *testing.T, s string, at uint, c byte) {
		at %= uint(len(s) + 1)
		var variant string
		switch {
		case c == '\t' || c == '\n' || c == '\r':
			variant = s[:at] + string(rune(c)) + s[at:]
		case c <= ' ' && at%2 == 0:
			variant = string(rune(c)) + s
		case c <= ' ':
			variant = s + string(rune(c))
		default:
			return
		}
		for _, g := range gs {
			if a, b := g.visit(s, false, ""), g.visit(variant, false, ""); a != b {
				t.Fatalf("visit(%q) = %q but visit(%q) = %q", s, a, variant, b)
			}
		}
	})
}
