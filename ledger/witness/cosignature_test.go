package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

// testCosigner makes cosignature/v1 signatures as tlog-cosignature
// describes them, written out here independently of the verifier.
type testCosigner struct {
	name string
	hash uint32
	priv ed25519.PrivateKey
	time uint64
}

func newTestCosigner(t testing.TB, name string, seed byte, time uint64) (*testCosigner, string) {
	t.Helper()
	vkey, priv := testVKey(name, seed)
	_, rest, _ := strings.Cut(vkey, "+")
	hash, err := strconv.ParseUint(rest[:8], 16, 32)
	if err != nil {
		t.Fatal(err)
	}
	return &testCosigner{name: name, hash: uint32(hash), priv: priv, time: time}, vkey
}

func (s *testCosigner) Name() string    { return s.name }
func (s *testCosigner) KeyHash() uint32 { return s.hash }

func (s *testCosigner) Sign(msg []byte) ([]byte, error) {
	m := fmt.Sprintf("cosignature/v1\ntime %d\n%s", s.time, msg)
	sig := binary.BigEndian.AppendUint64(nil, s.time)
	return append(sig, ed25519.Sign(s.priv, []byte(m))...), nil
}

// ed25519VKey is an ordinary signed-note Ed25519 vkey (type 0x01), the
// kind a log's checkpoint key has.
func ed25519VKey(name string) string {
	_, vkey, err := note.GenerateKey(rand.Reader, name)
	if err != nil {
		panic(err)
	}
	return vkey
}

func testCheckpointText(origin string, size int) string {
	return fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(bytesOf(byte(size), 32)))
}

func TestNewCosignatureVerifier(t *testing.T) {
	vkey, priv := testVKey("witness.example/w1", 1)
	v, err := NewCosignatureVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	if v.Name() != "witness.example/w1" || fmt.Sprintf("%08x", v.KeyHash()) != strings.Split(vkey, "+")[1] {
		t.Fatalf("name %q hash %08x from %s", v.Name(), v.KeyHash(), vkey)
	}

	pub := priv.Public().(ed25519.PublicKey)
	withKey := func(name, hash string, key []byte) string {
		return name + "+" + hash + "+" + base64.StdEncoding.EncodeToString(key)
	}
	hashOf := func(name string, key []byte) string { return fmt.Sprintf("%08x", keyHash(name, key)) }
	mldsa := append([]byte{0x06}, make([]byte, 1312)...)
	short := append([]byte{0x04}, pub[:31]...)
	for _, tc := range []struct{ name, vkey, want string }{
		{"empty", "", "want name+hash+base64key"},
		{"name only", "witness.example/w1", "want name+hash+base64key"},
		{"short hash", withKey("w", "0000", append([]byte{4}, pub...)), "want name+hash+base64key"},
		{"bad base64", "w+00000000+!!!", "want name+hash+base64key"},
		{"space in name", withKey("a b", hashOf("a b", append([]byte{4}, pub...)), append([]byte{4}, pub...)), "want name+hash+base64key"},
		{"wrong hash", withKey("w", "00000000", append([]byte{4}, pub...)), "key hash 00000000 does not match"},
		{"hash of another name", withKey("w", hashOf("v", append([]byte{4}, pub...)), append([]byte{4}, pub...)), "does not match"},
		{"ed25519 note key", ed25519VKey("w"), "key type 0x01, want 0x04"},
		{"ml-dsa-44", withKey("w", hashOf("w", mldsa), mldsa), "ML-DSA-44 (type 0x06) is not supported"},
		{"short key", withKey("w", hashOf("w", short), short), "31-byte key, want 32"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewCosignatureVerifier(tc.vkey)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewCosignatureVerifier(%q) = %v, %v; want error containing %q", tc.vkey, v, err, tc.want)
			}
		})
	}
}

func TestCosignatureVerify(t *testing.T) {
	const when = 1700000000
	w1, vkey := newTestCosigner(t, "witness.example/w1", 1, when)
	other, _ := newTestCosigner(t, "witness.example/w1", 2, when)
	v, err := NewCosignatureVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	text := []byte(testCheckpointText("example.com/log", 7))
	sig, _ := w1.Sign(text)

	retimed := bytes.Clone(sig)
	binary.BigEndian.PutUint64(retimed, when+1)
	future := *w1
	future.time = math.MaxInt64 + 1
	tooLate, _ := future.Sign(text)
	otherSig, _ := other.Sign(text)
	ext := []byte(string(text) + "extension line\n")
	extSig, _ := w1.Sign(ext)

	for _, tc := range []struct {
		name string
		msg  []byte
		sig  []byte
		want bool
	}{
		{"valid", text, sig, true},
		{"extension lines are signed too", ext, extSig, true},
		{"extension line dropped", text, extSig, false},
		{"tampered checkpoint", bytes.Replace(text, []byte("\n7\n"), []byte("\n8\n"), 1), sig, false},
		{"wrong timestamp", text, retimed, false},
		{"timestamp past 2^63-1", text, tooLate, false},
		{"wrong key", text, otherSig, false},
		{"truncated", text, sig[:len(sig)-1], false},
		{"no timestamp", text, sig[8:], false},
		{"trailing byte", text, append(bytes.Clone(sig), 0), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := v.Verify(tc.msg, tc.sig); got != tc.want {
				t.Fatalf("Verify = %v, want %v", got, tc.want)
			}
		})
	}

	// Through note.Open, as VerifyCheckpoint uses it.
	signed, err := note.Sign(&note.Note{Text: string(text)}, w1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open(signed, note.VerifierList(v)); err != nil {
		t.Fatalf("open cosigned note: %v", err)
	}
	tampered := bytes.Replace(signed, []byte("\n7\n"), []byte("\n8\n"), 1)
	var invalid *note.InvalidSignatureError
	if _, err := note.Open(tampered, note.VerifierList(v)); !errors.As(err, &invalid) {
		t.Fatalf("open tampered note: %v, want an InvalidSignatureError", err)
	}
}

func TestVerifyCheckpoint(t *testing.T) {
	const origin = "example.com/log"
	logSkey, logVKey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	logSigner, _ := note.NewSigner(logSkey)
	logVerifier, _ := note.NewVerifier(logVKey)
	imposterSkey, _, _ := note.GenerateKey(rand.Reader, origin)
	imposter, _ := note.NewSigner(imposterSkey)

	a, aKey := newTestCosigner(t, "witness.example/a", 1, 1700000000)
	b, bKey := newTestCosigner(t, "witness.example/b", 2, 1700000001)
	c, cKey := newTestCosigner(t, "witness.example/c", 3, 1700000002)
	stranger, _ := newTestCosigner(t, "witness.example/a", 9, 1700000000)
	p, err := ParsePolicy(strings.NewReader(fmt.Sprintf(`
witness a %s https://a.example
witness b %s https://b.example
witness c %s https://c.example
group two 2 a b c
quorum two
`, aKey, bKey, cKey)))
	if err != nil {
		t.Fatal(err)
	}

	text := testCheckpointText(origin, 7)
	sign := func(text string, signers ...note.Signer) []byte {
		signed, err := note.Sign(&note.Note{Text: text}, signers...)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}

	for _, tc := range []struct {
		name      string
		signed    []byte
		witnesses string
		quorumErr bool
		err       string
	}{
		{"two of three", sign(text, logSigner, a, b), "[a b]", false, ""},
		{"three of three", sign(text, c, logSigner, b, a), "[a b c]", false, ""},
		{"one of three", sign(text, logSigner, b), "[b]", true, ""},
		{"log only", sign(text, logSigner), "[]", true, ""},
		{"stranger with a's name is ignored", sign(text, logSigner, stranger, b), "[b]", true, ""},
		{"invalid cosignature from a known key", flipLastSignature(sign(text, logSigner, b, a)), "", false, "invalid signature for key witness.example/a"},
		{"invalid log signature", flipLastSignature(sign(text, a, b, logSigner)), "", false, "invalid signature for key example.com/log"},
		{"no log signature", sign(text, a, b), "", false, "no signature from log key example.com/log"},
		{"another key with the log's name", sign(text, imposter, a, b), "", false, "no signature from log key"},
		{"no known signature", sign(text, imposter), "", false, "no verifiable signatures"},
		{"origin is not the key's name", sign(testCheckpointText("example.com/other", 7), logSigner, a, b), "", false, `origin "example.com/other" is not the log key's name`},
		{"size with leading zero", sign(strings.Replace(text, "\n7\n", "\n07\n", 1), logSigner, a, b), "", false, `malformed checkpoint: size "07"`},
		{"not a note", []byte(text), "", false, "malformed note"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, names, err := VerifyCheckpoint(tc.signed, logVerifier, p)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) || errors.Is(err, ErrQuorum) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			case tc.quorumErr:
				if !errors.Is(err, ErrQuorum) {
					t.Fatalf("err = %v, want ErrQuorum", err)
				}
			case err != nil:
				t.Fatal(err)
			}
			if n == nil || n.Text != text {
				t.Fatalf("note %+v", n)
			}
			if got := fmt.Sprint(names); got != tc.witnesses {
				t.Fatalf("witnesses %s, want %s", got, tc.witnesses)
			}
		})
	}

	if _, _, err := VerifyCheckpoint(sign(text, logSigner, a, b), logVerifier, nil); err == nil {
		t.Fatal("a nil policy verified a checkpoint")
	}
}

// flipLastSignature flips a bit in the signature (not the key hash) of the
// last signature line of signed.
func flipLastSignature(signed []byte) []byte {
	lines := strings.Split(strings.TrimSuffix(string(signed), "\n"), "\n")
	last := lines[len(lines)-1]
	i := strings.LastIndexByte(last, ' ')
	raw, err := base64.StdEncoding.DecodeString(last[i+1:])
	if err != nil {
		panic(err)
	}
	raw[len(raw)-1] ^= 1
	lines[len(lines)-1] = last[:i+1] + base64.StdEncoding.EncodeToString(raw)
	return []byte(strings.Join(lines, "\n") + "\n")
}
