package witness

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
)

// testVKey builds a cosignature/v1 vkey for a key derived from seed, with
// the key hash computed here rather than by the package under test.
func testVKey(name string, seed byte) (string, ed25519.PrivateKey) {
	priv := ed25519.NewKeyFromSeed(bytesOf(seed, ed25519.SeedSize))
	typed := append([]byte{0x04}, priv.Public().(ed25519.PublicKey)...)
	sum := sha256.Sum256(append([]byte(name+"\n"), typed...))
	return fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(sum[:4]), base64.StdEncoding.EncodeToString(typed)), priv
}

func bytesOf(b byte, n int) []byte { return []byte(strings.Repeat(string([]byte{b}), n)) }

// expandKeys replaces {A}…{E} in a policy text with distinct witness keys.
func expandKeys(s string) string {
	for i, k := range "ABCDE" {
		vkey, _ := testVKey("witness.example/"+string(k), byte(i+1))
		s = strings.ReplaceAll(s, "{"+string(k)+"}", vkey)
	}
	return s
}

func TestParsePolicy(t *testing.T) {
	for _, tc := range []struct {
		name      string
		text      string
		witnesses []string
		quorum    string
	}{
		{"one witness", "witness a {A} https://a.example\nquorum a\n", []string{"a"}, "a"},
		{"comments, blanks, tabs, no final newline", `
# witnesses we trust
witness	a  {A}	https://a.example/prefix/   # trailing comment
	# indented comment

witness b {B} http://127.0.0.1:7380
group g any a b #comment
quorum g`, []string{"a", "b"}, "g"},
		{"nested groups", `
witness a {A} https://a.example
witness b {B} https://b.example
witness c {C} https://c.example
witness d {D} https://d.example
group abc 2 a b c
group top all abc d
quorum top
`, []string{"a", "b", "c", "d"}, "top"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy(strings.NewReader(expandKeys(tc.text)))
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, w := range p.Witnesses() {
				names = append(names, w.Name)
				if w.Verifier() == nil || !strings.HasPrefix(w.VKey, w.Verifier().Name()+"+") {
					t.Errorf("witness %s: verifier %v for vkey %s", w.Name, w.Verifier(), w.VKey)
				}
			}
			if fmt.Sprint(names) != fmt.Sprint(tc.witnesses) || p.Quorum() != tc.quorum {
				t.Fatalf("witnesses %v quorum %s, want %v %s", names, p.Quorum(), tc.witnesses, tc.quorum)
			}
		})
	}
}

func TestParsePolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "no quorum line"},
		{"only comments", "# nothing\n\n", "no quorum line"},
		{"unknown keyword", "witness a {A} https://a.example\nlog x\nquorum a\n", `line 2: unknown keyword "log"`},
		{"witness fields", "witness a {A}\n", "line 1: witness takes 3 fields"},
		{"witness extra field", "witness a {A} https://a.example extra\n", "line 1: witness takes 3 fields"},
		{"duplicate witness", "witness a {A} https://a.example\nwitness a {B} https://b.example\n", `line 2: name "a" defined twice`},
		{"group reuses witness name", "witness a {A} https://a.example\ngroup a any a\n", `line 2: name "a" defined twice`},
		{"same key twice", "witness a {A} https://a.example\nwitness b {A} https://b.example\n", "line 2: witness b: same key as witness a"},
		{"bad vkey", "witness a witness.example/A+00000000+BAAA https://a.example\n", "line 1: witness a: cosignature vkey"},
		{"log key as witness key", "witness a " + ed25519VKey("witness.example/A") + " https://a.example\n", "key type 0x01, want 0x04"},
		{"url scheme", "witness a {A} ftp://a.example\n", "line 1: witness a: url"},
		{"url without host", "witness a {A} https:///x\n", "line 1: witness a: url"},
		{"url query", "witness a {A} https://a.example/?x=1\n", "line 1: witness a: url"},
		{"url fragment", "witness a {A} https://a.example/x#\n", "no query or fragment"}, // a # inside a field is not a comment
		{"bad name", "witness a+b {A} https://a.example\n", `line 1: name "a+b"`},
		{"undefined member", "witness a {A} https://a.example\ngroup g 1 a b\n", `line 2: group g: member "b" is not defined`},
		{"member defined later", "group g any a\nwitness a {A} https://a.example\n", `line 1: group g: member "a" is not defined`},
		{"self member", "witness a {A} https://a.example\ngroup g any a g\n", `member "g" is not defined`},
		{"repeated member", "witness a {A} https://a.example\ngroup g 1 a a\n", `line 2: group g: member "a" listed twice`},
		// A witness under two members (directly and through a group) would
		// let one cosignature meet a "2 of" quorum.
		{"witness under two members", "witness w1 {A} https://a.example\nwitness w2 {B} https://b.example\ngroup one any w2\ngroup q 2 w2 one\nquorum q\n",
			"line 4: group q: members w2 and one both hold witness w2, which would count twice"},
		{"witness under two nested groups", "witness a {A} https://a.example\nwitness b {B} https://b.example\ngroup g1 any a b\ngroup g2 any b\ngroup q all g1 g2\n",
			"line 5: group q: members g1 and g2 both hold witness b"},
		{"group without members", "group g any\n", "line 1: group takes NAME, K|all|any and at least one MEMBER"},
		{"K zero", "witness a {A} https://a.example\ngroup g 0 a\n", `line 2: group g: threshold "0"`},
		{"K too large", "witness a {A} https://a.example\nwitness b {B} https://b.example\ngroup g 3 a b\n", `line 3: group g: threshold "3": want all, any or a number from 1 to 2`},
		{"K negative", "witness a {A} https://a.example\ngroup g -1 a\n", `threshold "-1"`},
		{"K leading zero", "witness a {A} https://a.example\ngroup g 01 a\n", `threshold "01"`},
		{"K word", "witness a {A} https://a.example\ngroup g some a\n", `threshold "some"`},
		{"missing quorum", "witness a {A} https://a.example\n", "no quorum line"},
		{"repeated quorum", "witness a {A} https://a.example\nquorum a\n\nquorum a\n", "line 4: quorum repeated (first on line 2)"},
		{"quorum undefined", "witness a {A} https://a.example\nquorum b\n", `line 2: quorum names "b"`},
		{"quorum fields", "witness a {A} https://a.example\nquorum a a\n", "line 2: quorum takes 1 field"},
		{"quorum none", "quorum none\n", `line 1: quorum names "none"`},
		{"line too long", "# " + strings.Repeat("x", maxPolicyLine) + "\n", "too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParsePolicy(strings.NewReader(expandKeys(tc.text)))
			if err == nil {
				t.Fatalf("parsed %+v, want error containing %q", p, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestPolicySatisfied(t *testing.T) {
	p, err := ParsePolicy(strings.NewReader(expandKeys(`
witness a {A} https://a.example
witness b {B} https://b.example
witness c {C} https://c.example
witness d {D} https://d.example
witness e {E} https://e.example
group abc 2 a b c
group top all abc d
group either any top e
quorum either
`)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		verified string
		want     bool
	}{
		{"", false},
		{"a b d", true},
		{"b c d", true},
		{"a b c", false},
		{"a d", false},
		{"e", true},
		{"x y z", false},       // names outside the policy count for nothing
		{"abc top d", false},   // group names are not witnesses
		{"a b c d e", true},    // more than enough
		{"a b d=false", false}, // an entry set to false counts for nothing
	} {
		verified := make(map[string]bool)
		for _, f := range strings.Fields(tc.verified) {
			name, v, _ := strings.Cut(f, "=")
			verified[name] = v != "false"
		}
		if got := p.Satisfied(verified); got != tc.want {
			t.Errorf("Satisfied(%s) = %v, want %v", tc.verified, got, tc.want)
		}
	}
}

func TestWitnessesIsACopy(t *testing.T) {
	p, err := ParsePolicy(strings.NewReader(expandKeys("witness a {A} https://a.example\nquorum a\n")))
	if err != nil {
		t.Fatal(err)
	}
	p.Witnesses()[0].Name = "changed"
	if p.Witnesses()[0].Name != "a" || !p.Satisfied(map[string]bool{"a": true}) {
		t.Fatal("a caller's edit reached the policy")
	}
}
