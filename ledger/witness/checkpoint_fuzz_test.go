package witness

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	tlogfmt "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
)

// FuzzVerifyCheckpoint parses fuzzed checkpoint text and verifies it as a
// signed note, signed by a fuzzed choice of the log, the three witnesses
// of a two-of-three policy, a key with the log's name and a stranger with
// a witness's name, then maybe with one bit of the note flipped.
// Properties:
//   - parseCheckpoint accepts only the one canonical text of what it
//     returns (origin, size, base64 hash, then its extension lines), and
//     whatever it accepts, the transparency-dev parser the monitor and the
//     verifier use reads the same way;
//   - VerifyCheckpoint accepts (nil or ErrQuorum) only a note the log
//     signed, whose text is exactly the text signed, and then reports as
//     cosigners exactly the policy's witnesses that signed, in policy
//     order, with ErrQuorum exactly when fewer than two did; a note with
//     a flipped bit is never accepted with another text.
func FuzzVerifyCheckpoint(f *testing.F) {
	const origin = "example.com/log"
	logSkey, logVKey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		f.Fatal(err)
	}
	logSigner, _ := note.NewSigner(logSkey)
	logVerifier, _ := note.NewVerifier(logVKey)
	imposterSkey, _, _ := note.GenerateKey(rand.Reader, origin)
	imposter, _ := note.NewSigner(imposterSkey)
	a, aKey := newTestCosigner(f, "witness.example/a", 1, 1700000000)
	b, bKey := newTestCosigner(f, "witness.example/b", 2, 1700000001)
	c, cKey := newTestCosigner(f, "witness.example/c", 3, 1700000002)
	stranger, _ := newTestCosigner(f, "witness.example/a", 9, 1700000000)
	p, err := ParsePolicy(strings.NewReader(fmt.Sprintf("witness a %s https://a.example\nwitness b %s https://b.example\nwitness c %s https://c.example\ngroup two 2 a b c\nquorum two\n", aKey, bKey, cKey)))
	if err != nil {
		f.Fatal(err)
	}
	// Signers by bit of the fuzzed byte; witnesses are bits 1–3.
	signers := []note.Signer{logSigner, a, b, c, imposter, stranger}
	witnessNames := []string{"a", "b", "c"}

	text := testCheckpointText(origin, 7)
	f.Add(text, uint8(0b0111), uint16(0))
	f.Add(text, uint8(0b1111), uint16(0))
	f.Add(text, uint8(0b0011), uint16(0))
	f.Add(text, uint8(0b0111), uint16(200))
	f.Add(text+"extension one\nextension two\n", uint8(0b110111), uint16(0))
	f.Add(strings.Replace(text, "\n7\n", "\n07\n", 1), uint8(0b0111), uint16(0))
	f.Add(testCheckpointText("example.com/other", 1<<20), uint8(0b0101), uint16(0))
	f.Add(text+"\n", uint8(0b0111), uint16(0))

	f.Fuzz(func(t *testing.T, text string, who uint8, flip uint16) {
		if cp, err := parseCheckpoint(text); err == nil {
			canonical := fmt.Sprintf("%s\n%d\n%s\n", cp.origin, cp.size, base64.StdEncoding.EncodeToString(cp.hash))
			if !strings.HasPrefix(text, canonical) {
				t.Fatalf("parseCheckpoint accepted %q, whose canonical text is %q", text, canonical)
			}
			var ref tlogfmt.Checkpoint
			if _, err := ref.Unmarshal([]byte(text)); err != nil || ref.Origin != cp.origin || ref.Size != cp.size || !bytes.Equal(ref.Hash, cp.hash) {
				t.Fatalf("transparency-dev reads %q otherwise: %+v, %v", text, ref, err)
			}
		}

		var chosen []note.Signer
		for i, s := range signers {
			if who&(1<<i) != 0 {
				chosen = append(chosen, s)
			}
		}
		signed, err := note.Sign(&note.Note{Text: text}, chosen...)
		if err != nil {
			signed = []byte(text) // not a note text: verify the raw bytes
		}
		flipped := flip != 0 && len(signed) > 0
		if flipped {
			signed = bytes.Clone(signed)
			bit := int(flip-1) % (len(signed) * 8)
			signed[bit/8] ^= 1 << (bit % 8)
		}
		n, names, err := VerifyCheckpoint(signed, logVerifier, p)
		if err != nil && !errors.Is(err, ErrQuorum) {
			return
		}
		if n == nil || n.Text != text {
			t.Fatalf("accepted a note whose text is not the text signed (flipped %v): %q", flipped, signed)
		}
		if who&1 == 0 {
			t.Fatalf("accepted a note the log did not sign: %q", signed)
		}
		if _, err := parseCheckpoint(n.Text); err != nil {
			t.Fatalf("accepted a malformed checkpoint: %v", err)
		}
		if flipped {
			return // a flip in a cosignature line may drop that witness
		}
		var want []string
		for i, name := range witnessNames {
			if who&(1<<(i+1)) != 0 {
				want = append(want, name)
			}
		}
		if !slices.Equal(names, want) {
			t.Fatalf("cosigners %v, want %v", names, want)
		}
		if quorum := len(want) >= 2; quorum != (err == nil) {
			t.Fatalf("%d cosigners, quorum error %v", len(want), err)
		}
	})
}
