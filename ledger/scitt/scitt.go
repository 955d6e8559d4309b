// Package scitt exports a receipt of the log in the IETF's form: a SCITT
// transparent statement (RFC 9943), that is a signed statement, the
// COSE_Sign1 of the chio.receipt.v1 bytes by the kernel key, carrying a
// COSE Receipt (RFC 9942) of its inclusion in the log: an RFC 9162
// inclusion proof (vds 1, RFC9162_SHA256) whose detached payload, the
// Merkle root at the proof's tree size, is signed with the log's
// checkpoint key.
//
// The transparency service's profile, which RFC 9942 leaves to it: the
// Merkle leaf is the statement's payload, the receipt's canonical bytes
// exactly as the log stores them, so the proof is the log's own
// inclusion proof and the root is the one its checkpoints sign.
//
// Both signatures are Ed25519 (COSE alg -8, EdDSA). kid is the SHA-256 of
// the signing public key. The statement's CWT claims are iss = the
// receipt's kernel_key and sub = "urn:chio:receipt:" and the receipt id;
// the COSE Receipt's are iss = the log origin and the same sub.
package scitt

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/schemas"
)

// COSE header labels and values this package writes and reads.
const (
	labelAlg         = 1
	labelContentType = 3
	labelKid         = 4
	labelCWTClaims   = 15
	labelReceipts    = 394 // RFC 9943: receipts in a transparent statement's unprotected header
	labelVDS         = 395 // RFC 9942: verifiable data structure
	labelVDP         = 396 // RFC 9942: verifiable data structure proofs
	vdpInclusion     = -1
	claimIss         = 1
	claimSub         = 2
	algEdDSA         = -8
	vdsRFC9162       = 1 // RFC9162_SHA256
	tagSign1         = 18
)

// Media types.
const (
	// StatementMediaType is the media type of a (transparent) statement.
	StatementMediaType = "application/scitt-statement+cose"
	// PayloadContentType is the statement payload's content type: a
	// chio.receipt.v1 in its canonical JSON.
	PayloadContentType = "application/vnd.chio.receipt.v1+json"
)

// SubjectPrefix starts the sub claim of a receipt's statement.
const SubjectPrefix = "urn:chio:receipt:"

// Inclusion is a receipt's place in the log: its leaf index, the tree
// size of the proof, the audit path and the root at that size.
type Inclusion struct {
	Index, Size uint64
	Path        [][]byte
	Root        []byte
}

// Signers are the keys of an export: the kernel key that signed the
// receipt (it signs the statement) and the log's checkpoint key (it signs
// the COSE Receipt), with the log's origin.
type Signers struct {
	Kernel ed25519.PrivateKey
	Log    note.Signer
	// LogPublic is Log's public key (VKeyPublicKey of its verifier key):
	// a note Ed25519 signature is the plain signature of the message, so
	// the COSE Receipt verifies under it.
	LogPublic ed25519.PublicKey
	Origin    string
}

var encMode = func() cbor.EncMode {
	m, err := cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic(err) // fixed options
	}
	return m
}()

// sign1 is a COSE_Sign1 message's four members.
type sign1 struct {
	_           struct{} `cbor:",toarray"`
	Protected   []byte
	Unprotected map[int64]cbor.RawMessage
	Payload     []byte // nil: detached
	Signature   []byte
}

// sigStructure is the bytes a COSE_Sign1 signature covers (RFC 9052 §4.4),
// with no external data.
func sigStructure(protected, payload []byte) ([]byte, error) {
	return encMode.Marshal([]any{"Signature1", protected, []byte{}, payload})
}

func kid(pub ed25519.PublicKey) []byte {
	sum := sha256.Sum256(pub)
	return sum[:]
}

// Export is the transparent statement of one receipt: receipt is its
// canonical bytes as the log stores them (the leaf), id its id.
func Export(s Signers, receipt []byte, id string, in Inclusion) ([]byte, error) {
	kernelPub := s.Kernel.Public().(ed25519.PublicKey)
	var r struct {
		KernelKey string `json:"kernel_key"`
	}
	if err := json.Unmarshal(receipt, &r); err != nil || r.KernelKey == "" {
		return nil, fmt.Errorf("scitt export of %s: the receipt names no kernel_key", id)
	}
	if r.KernelKey != schemas.EncodePublicKey(kernelPub) {
		// The statement's issuer would be a key that did not sign it.
		return nil, fmt.Errorf("scitt export of %s: the receipt was signed by %s, not this ledger's kernel key", id, r.KernelKey)
	}
	sub := SubjectPrefix + id
	protected, err := encMode.Marshal(map[int64]any{
		labelAlg: algEdDSA, labelContentType: PayloadContentType, labelKid: kid(kernelPub),
		labelCWTClaims: map[int64]string{claimIss: r.KernelKey, claimSub: sub},
	})
	if err != nil {
		return nil, fmt.Errorf("scitt export of %s: %w", id, err)
	}
	tbs, err := sigStructure(protected, receipt)
	if err != nil {
		return nil, fmt.Errorf("scitt export of %s: %w", id, err)
	}
	rc, err := cose(s, sub, in)
	if err != nil {
		return nil, fmt.Errorf("scitt export of %s: %w", id, err)
	}
	receipts, err := encMode.Marshal([][]byte{rc})
	if err != nil {
		return nil, fmt.Errorf("scitt export of %s: %w", id, err)
	}
	msg := sign1{Protected: protected, Unprotected: map[int64]cbor.RawMessage{labelReceipts: receipts},
		Payload: receipt, Signature: ed25519.Sign(s.Kernel, tbs)}
	out, err := encMode.Marshal(cbor.Tag{Number: tagSign1, Content: msg})
	if err != nil {
		return nil, fmt.Errorf("scitt export of %s: %w", id, err)
	}
	return out, nil
}

// cose is the COSE Receipt of inclusion: detached payload (the root),
// signed by the log key.
func cose(s Signers, sub string, in Inclusion) ([]byte, error) {
	protected, err := encMode.Marshal(map[int64]any{
		labelAlg: algEdDSA, labelKid: kid(s.LogPublic), labelVDS: vdsRFC9162,
		labelCWTClaims: map[int64]string{claimIss: s.Origin, claimSub: sub},
	})
	if err != nil {
		return nil, err
	}
	path := in.Path
	if path == nil {
		path = [][]byte{}
	}
	p, err := encMode.Marshal([]any{in.Size, in.Index, path})
	if err != nil {
		return nil, err
	}
	vdp, err := encMode.Marshal(map[int64][][]byte{vdpInclusion: {p}})
	if err != nil {
		return nil, err
	}
	tbs, err := sigStructure(protected, in.Root)
	if err != nil {
		return nil, err
	}
	sig, err := s.Log.Sign(tbs)
	if err != nil {
		return nil, fmt.Errorf("sign the COSE receipt: %w", err)
	}
	return encMode.Marshal(cbor.Tag{Number: tagSign1, Content: sign1{Protected: protected,
		Unprotected: map[int64]cbor.RawMessage{labelVDP: vdp}, Signature: sig}})
}

// VKeyPublicKey is the Ed25519 public key of a note verifier key
// ("name+hash+base64(0x01 || key)"): the key a COSE Receipt verifies
// under.
func VKeyPublicKey(vkey string) (ed25519.PublicKey, error) {
	parts := strings.SplitN(strings.TrimSpace(vkey), "+", 3)
	if len(parts) != 3 {
		return nil, errors.New("verifier key: want name+hash+key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) != 1+ed25519.PublicKeySize || raw[0] != 1 {
		return nil, errors.New("verifier key: not an Ed25519 note key")
	}
	return ed25519.PublicKey(raw[1:]), nil
}

// Verified is what a transparent statement proved: that Receipt is a
// leaf of the log's tree whose root is Root. Index and Size are as the
// proof states them: the log's signature covers the root, and one path
// folds to that root from more than one (index, size), so they are not
// proved.
type Verified struct {
	Receipt []byte // the payload: the chio.receipt.v1 bytes
	Subject string
	Inclusion
}

// Verify checks a transparent statement: the statement's signature by
// kernelKey, then each part of its one COSE Receipt (vds 1, the
// inclusion proof folded into a root from the payload's leaf hash, and
// that root's signature by logKey). It does not check the receipt inside
// (its own signature and fields): callers do, as for any receipt.
func Verify(ts []byte, kernelKey, logKey ed25519.PublicKey) (*Verified, error) {
	msg, err := decodeSign1(ts)
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	ph, err := decodeHeader(msg.Protected)
	if err != nil {
		return nil, fmt.Errorf("statement: protected header: %w", err)
	}
	if err := checkAlgKid(ph, kernelKey); err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	var ct string
	if cbor.Unmarshal(ph[labelContentType], &ct) != nil || ct != PayloadContentType {
		return nil, fmt.Errorf("statement: content type %q, want %s", ct, PayloadContentType)
	}
	claims, err := decodeClaims(ph)
	if err != nil {
		return nil, fmt.Errorf("statement: %w", err)
	}
	if msg.Payload == nil {
		return nil, errors.New("statement: the payload (the receipt) is detached")
	}
	tbs, err := sigStructure(msg.Protected, msg.Payload)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(kernelKey, tbs, msg.Signature) {
		return nil, errors.New("statement: the signature does not verify under the kernel key")
	}
	var receipts [][]byte
	if err := cbor.Unmarshal(msg.Unprotected[labelReceipts], &receipts); err != nil || len(receipts) != 1 {
		return nil, fmt.Errorf("statement: want one COSE Receipt in header %d", labelReceipts)
	}
	in, err := verifyReceipt(receipts[0], msg.Payload, claims[claimSub], logKey)
	if err != nil {
		return nil, fmt.Errorf("COSE receipt: %w", err)
	}
	return &Verified{Receipt: msg.Payload, Subject: claims[claimSub], Inclusion: *in}, nil
}

func verifyReceipt(raw, leaf []byte, sub string, logKey ed25519.PublicKey) (*Inclusion, error) {
	msg, err := decodeSign1(raw)
	if err != nil {
		return nil, err
	}
	ph, err := decodeHeader(msg.Protected)
	if err != nil {
		return nil, fmt.Errorf("protected header: %w", err)
	}
	if err := checkAlgKid(ph, logKey); err != nil {
		return nil, err
	}
	var vds int64
	if cbor.Unmarshal(ph[labelVDS], &vds) != nil || vds != vdsRFC9162 {
		return nil, fmt.Errorf("vds %d, want %d (RFC9162_SHA256)", vds, vdsRFC9162)
	}
	claims, err := decodeClaims(ph)
	if err != nil {
		return nil, err
	}
	if claims[claimSub] != sub {
		return nil, fmt.Errorf("sub %q is not the statement's %q", claims[claimSub], sub)
	}
	if msg.Payload != nil {
		return nil, errors.New("the payload (the root) must be detached")
	}
	var vdp map[int64][][]byte
	if err := cbor.Unmarshal(msg.Unprotected[labelVDP], &vdp); err != nil || len(vdp[vdpInclusion]) != 1 {
		return nil, fmt.Errorf("want one inclusion proof in header %d", labelVDP)
	}
	var p struct {
		_     struct{} `cbor:",toarray"`
		Size  uint64
		Index uint64
		Path  [][]byte
	}
	if err := cbor.Unmarshal(vdp[vdpInclusion][0], &p); err != nil {
		return nil, fmt.Errorf("inclusion proof: %w", err)
	}
	if p.Index >= p.Size {
		return nil, fmt.Errorf("inclusion proof: leaf %d is not in a tree of size %d", p.Index, p.Size)
	}
	root, err := proof.RootFromInclusionProof(rfc6962.DefaultHasher, p.Index, p.Size, rfc6962.DefaultHasher.HashLeaf(leaf), p.Path)
	if err != nil {
		return nil, fmt.Errorf("inclusion proof: %w", err)
	}
	tbs, err := sigStructure(msg.Protected, root)
	if err != nil {
		return nil, err
	}
	if !ed25519.Verify(logKey, tbs, msg.Signature) {
		return nil, errors.New("the signature over the root does not verify under the log key: the proof or the key is not the log's")
	}
	return &Inclusion{Index: p.Index, Size: p.Size, Path: p.Path, Root: root}, nil
}

func decodeSign1(raw []byte) (*sign1, error) {
	var tag cbor.RawTag
	if err := cbor.Unmarshal(raw, &tag); err != nil {
		return nil, fmt.Errorf("not CBOR: %w", err)
	}
	if tag.Number != tagSign1 {
		return nil, fmt.Errorf("CBOR tag %d, want %d (COSE_Sign1)", tag.Number, tagSign1)
	}
	var m sign1
	if err := cbor.Unmarshal(tag.Content, &m); err != nil {
		return nil, fmt.Errorf("not a COSE_Sign1: %w", err)
	}
	return &m, nil
}

func decodeHeader(protected []byte) (map[int64]cbor.RawMessage, error) {
	var h map[int64]cbor.RawMessage
	if err := cbor.Unmarshal(protected, &h); err != nil {
		return nil, err
	}
	return h, nil
}

func checkAlgKid(h map[int64]cbor.RawMessage, pub ed25519.PublicKey) error {
	var alg int64
	if cbor.Unmarshal(h[labelAlg], &alg) != nil || alg != algEdDSA {
		return fmt.Errorf("alg %d, want %d (EdDSA)", alg, algEdDSA)
	}
	var k []byte
	if cbor.Unmarshal(h[labelKid], &k) != nil || !bytes.Equal(k, kid(pub)) {
		return errors.New("kid is not the pinned key's")
	}
	return nil
}

func decodeClaims(h map[int64]cbor.RawMessage) (map[int64]string, error) {
	var c map[int64]string
	if err := cbor.Unmarshal(h[labelCWTClaims], &c); err != nil || c[claimIss] == "" || c[claimSub] == "" {
		return nil, errors.New("CWT claims: iss and sub are required")
	}
	return c, nil
}
