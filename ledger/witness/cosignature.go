package witness

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/note"
)

// Signature type bytes of C2SP vkeys that name a cosigner.
const (
	algCosignatureV1 = 0x04 // Ed25519 cosignature/v1
	algMLDSA44       = 0x06 // ML-DSA-44 subtree/v1, not supported here
)

// cosignatureSize is the length of a cosignature/v1 signature after the
// note's 4-byte key hash: an 8-byte timestamp and an Ed25519 signature.
const cosignatureSize = 8 + ed25519.SignatureSize

// ErrQuorum is wrapped by VerifyCheckpoint's error when the cosignatures
// present do not satisfy the policy's quorum.
var ErrQuorum = errors.New("witness quorum not met")

type cosignatureVerifier struct {
	name string
	hash uint32
	key  ed25519.PublicKey
}

// NewCosignatureVerifier parses a cosignature/v1 verifier key,
// name+hash+base64(0x04 || 32-byte Ed25519 public key), into a note
// verifier of timestamped cosignatures.
//
// A cosignature/v1 is the 8-byte big-endian POSIX time T followed by an
// Ed25519 signature over "cosignature/v1\ntime T\n" and the checkpoint's
// note text. Verify rejects T above 2^63-1 but, as the statement is "as of
// T", does not judge T against the clock: freshness is the caller's policy.
func NewCosignatureVerifier(vkey string) (note.Verifier, error) {
	name, rest, _ := strings.Cut(vkey, "+")
	hash16, key64, _ := strings.Cut(rest, "+")
	hash, err1 := strconv.ParseUint(hash16, 16, 32)
	key, err2 := base64.StdEncoding.DecodeString(key64)
	if !isValidName(name) || len(hash16) != 8 || err1 != nil || err2 != nil || len(key) == 0 {
		return nil, fmt.Errorf("cosignature vkey %q: want name+hash+base64key", vkey)
	}
	switch key[0] {
	case algCosignatureV1:
	case algMLDSA44:
		return nil, fmt.Errorf("cosignature vkey %s: ML-DSA-44 (type 0x06) is not supported, only Ed25519 cosignature/v1 (type 0x04)", name)
	default:
		return nil, fmt.Errorf("cosignature vkey %s: key type 0x%02x, want 0x04 (Ed25519 cosignature/v1)", name, key[0])
	}
	if len(key) != 1+ed25519.PublicKeySize {
		return nil, fmt.Errorf("cosignature vkey %s: %d-byte key, want %d", name, len(key)-1, ed25519.PublicKeySize)
	}
	if uint32(hash) != keyHash(name, key) {
		return nil, fmt.Errorf("cosignature vkey %s: key hash %s does not match the key", name, hash16)
	}
	return &cosignatureVerifier{name: name, hash: uint32(hash), key: ed25519.PublicKey(key[1:])}, nil
}

func (v *cosignatureVerifier) Name() string    { return v.name }
func (v *cosignatureVerifier) KeyHash() uint32 { return v.hash }

func (v *cosignatureVerifier) Verify(msg, sig []byte) bool {
	if len(sig) != cosignatureSize {
		return false
	}
	t := binary.BigEndian.Uint64(sig)
	if t > math.MaxInt64 {
		return false
	}
	return ed25519.Verify(v.key, cosignedMessage(t, msg), sig[8:])
}

// cosignedMessage is what a cosignature/v1 with time t signs over a
// checkpoint whose note text is body.
func cosignedMessage(t uint64, body []byte) []byte {
	m := make([]byte, 0, 64+len(body))
	m = append(m, "cosignature/v1\ntime "...)
	m = strconv.AppendUint(m, t, 10)
	m = append(m, '\n')
	return append(m, body...)
}

// keyHash is the signed-note key ID: the first 4 bytes of
// SHA-256(name || "\n" || type byte || public key).
func keyHash(name string, typedKey []byte) uint32 {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte("\n"))
	h.Write(typedKey)
	return binary.BigEndian.Uint32(h.Sum(nil))
}

// isValidName is signed-note's rule for key names, which this package
// also applies to policy names: non-empty UTF-8 without spaces or '+'.
func isValidName(name string) bool {
	return name != "" && utf8.ValidString(name) && strings.IndexFunc(name, unicode.IsSpace) < 0 && !strings.Contains(name, "+")
}

// VerifyCheckpoint opens a signed checkpoint with the log's key and the
// policy's witness keys and reports which witnesses (by policy name, in
// policy order) cosigned it. Signatures from other keys are ignored, but
// a signature line that names a known key and fails to verify makes the
// whole note invalid, as signed-note requires: attach only cosignatures
// that Client has checked. The log must have signed the checkpoint, and
// the checkpoint's origin must be the log key's name.
//
// When the cosignatures do not satisfy the quorum, the error wraps
// ErrQuorum and the note and the verified witnesses are still returned.
func VerifyCheckpoint(signedNote []byte, logVerifier note.Verifier, p *Policy) (*note.Note, []string, error) {
	if logVerifier == nil || p == nil {
		return nil, nil, errors.New("verify checkpoint: need a log verifier and a policy")
	}
	vs := make([]note.Verifier, 0, 1+len(p.witnesses))
	vs = append(vs, logVerifier)
	for _, w := range p.witnesses {
		vs = append(vs, w.verifier)
	}
	n, err := note.Open(signedNote, note.VerifierList(vs...))
	if err != nil {
		return nil, nil, fmt.Errorf("verify checkpoint: %w", err)
	}
	signed := func(v note.Verifier) bool {
		for _, s := range n.Sigs {
			if s.Name == v.Name() && s.Hash == v.KeyHash() {
				return true
			}
		}
		return false
	}
	if !signed(logVerifier) {
		return nil, nil, fmt.Errorf("verify checkpoint: no signature from log key %s", logVerifier.Name())
	}
	c, err := parseCheckpoint(n.Text)
	if err != nil {
		return nil, nil, fmt.Errorf("verify checkpoint: %w", err)
	}
	if c.origin != logVerifier.Name() {
		return nil, nil, fmt.Errorf("verify checkpoint: origin %q is not the log key's name %q", c.origin, logVerifier.Name())
	}
	var names []string
	verified := make(map[string]bool)
	for _, w := range p.witnesses {
		if signed(w.verifier) {
			names = append(names, w.Name)
			verified[w.Name] = true
		}
	}
	if !p.Satisfied(verified) {
		return n, names, fmt.Errorf("verify checkpoint of size %d: %w: quorum %s, cosigned by %d witnesses %v", c.size, ErrQuorum, p.Quorum(), len(names), names)
	}
	return n, names, nil
}

type checkpoint struct {
	origin string
	size   uint64
	hash   []byte
}

// parseCheckpoint parses a C2SP checkpoint's note text strictly: origin,
// size without leading zeros, a canonical base64 SHA-256 root hash, then
// optional non-empty extension lines.
func parseCheckpoint(text string) (checkpoint, error) {
	lines := strings.SplitN(text, "\n", 4)
	if len(lines) != 4 || lines[0] == "" {
		return checkpoint{}, errors.New("malformed checkpoint: want origin, size and hash lines")
	}
	size, err := strconv.ParseUint(lines[1], 10, 64)
	if err != nil || lines[1] != strconv.FormatUint(size, 10) {
		return checkpoint{}, fmt.Errorf("malformed checkpoint: size %q", lines[1])
	}
	// Strict: padding bits set would give one root hash a second text.
	hash, err := base64.StdEncoding.Strict().DecodeString(lines[2])
	if err != nil || len(hash) != sha256.Size {
		return checkpoint{}, fmt.Errorf("malformed checkpoint: root hash %q", lines[2])
	}
	if ext := lines[3]; ext != "" && (!strings.HasSuffix(ext, "\n") || strings.HasPrefix(ext, "\n") || strings.Contains(ext, "\n\n")) {
		return checkpoint{}, errors.New("malformed checkpoint: empty extension line")
	}
	return checkpoint{origin: lines[0], size: size, hash: hash}, nil
}

// splitNote splits a signed note into its text, which ends in a newline,
// and its signature lines.
func splitNote(signed []byte) (text, sigs []byte, err error) {
	i := bytes.LastIndex(signed, []byte("\n\n"))
	if i < 0 || len(signed) == i+2 || signed[len(signed)-1] != '\n' {
		return nil, nil, errors.New("malformed note: want text, a blank line and signature lines")
	}
	return signed[:i+1], signed[i+2:], nil
}
