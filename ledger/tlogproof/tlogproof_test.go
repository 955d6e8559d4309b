package tlogproof

import (
	"bytes"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	cp := []byte("example.com/log\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n— example.com/log abcd\n")
	for _, p := range []Proof{
		{Index: 0, Checkpoint: cp},
		{Index: 73894, Path: [][]byte{bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)}, Checkpoint: cp, Extra: []byte("hi")},
	} {
		raw := p.Marshal()
		if !Is(raw) {
			t.Fatal("Is")
		}
		got, err := Parse(raw)
		if err != nil {
			t.Fatalf("%v\n%s", err, raw)
		}
		if got.Index != p.Index || len(got.Path) != len(p.Path) || !bytes.Equal(got.Checkpoint, cp) || !bytes.Equal(got.Extra, p.Extra) {
			t.Fatalf("round trip: %+v", got)
		}
	}
}

func TestParseRejects(t *testing.T) {
	cp := "\n\norigin\n1\nAAAA\n\n— origin x\n"
	for name, raw := range map[string]string{
		"wrong header":    "c2sp.org/tlog-proof@v2\nindex 1" + cp,
		"no index":        "c2sp.org/tlog-proof@v1\nAAAA" + cp,
		"leading zero":    "c2sp.org/tlog-proof@v1\nindex 01" + cp,
		"negative":        "c2sp.org/tlog-proof@v1\nindex -1" + cp,
		"short hash":      "c2sp.org/tlog-proof@v1\nindex 1\nAAAA" + cp,
		"no checkpoint":   "c2sp.org/tlog-proof@v1\nindex 1\n",
		"bad extra":       "c2sp.org/tlog-proof@v1\nextra !!\nindex 1" + cp,
		"extra after idx": "c2sp.org/tlog-proof@v1\nindex 1\nextra AA==" + cp,
	} {
		if _, err := Parse([]byte(raw)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add((&Proof{Index: 5, Path: [][]byte{make([]byte, 32)}, Checkpoint: []byte("o\n1\nAA==\n\n— o x\n")}).Marshal())
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := Parse(raw)
		if err != nil {
			return
		}
		again, err := Parse(p.Marshal())
		if err != nil || again.Index != p.Index || len(again.Path) != len(p.Path) || !bytes.Equal(again.Checkpoint, p.Checkpoint) {
			t.Fatalf("re-parse of a parsed proof differs: %v", err)
		}
	})
}
