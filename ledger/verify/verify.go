// Package verify checks a receipt, its inclusion proof and a signed
// checkpoint offline, against keys pinned out of band: the three static
// inputs an auditor needs, and nothing fetched.
package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/tlogproof"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
)

// Inputs are the files and pinned keys of one verification.
type Inputs struct {
	Receipt    []byte // a chio.receipt.v1, or the {"receipt":…,"leaf_index":N} body of /v1/receipts/{id}
	Proof      []byte // the body of /v1/receipts/{id}/inclusion-proof, or a C2SP tlog-proof (/tlog-proof)
	Checkpoint []byte // a C2SP signed checkpoint note; optional with a tlog-proof, which carries one
	VKey       string // the log's note verifier key; its name is the origin
	KernelKey  string // the pinned kernel key (64 lowercase hex)
	// Witnesses, when set, is the witness policy whose quorum must have
	// cosigned the checkpoint.
	Witnesses *witness.Policy
}

// Failure names the first check that failed.
type Failure struct {
	Check string
	Err   error
}

func (f *Failure) Error() string { return fmt.Sprintf("%s: %v", f.Check, f.Err) }
func (f *Failure) Unwrap() error { return f.Err }

func failf(check, format string, args ...any) error {
	return &Failure{Check: check, Err: fmt.Errorf(format, args...)}
}

// Result describes what was verified.
type Result struct {
	ReceiptID string
	LeafIndex uint64
	TreeSize  uint64
	Origin    string
	Verdict   schemas.Verdict
	// Unreadable is set for a receipt no reader can decode whole (nested
	// deeper than schemas.MaxReceiptDepth): why. Its checks then ran over
	// the signed bytes member by member (verifyUnreadable), and it is as
	// verified as any other; but it is not one a reader can show.
	Unreadable string
	// Witnesses are the policy's witnesses that cosigned the checkpoint
	// (with Inputs.Witnesses).
	Witnesses []string
	// Root is the tree root a SCITT statement's COSE Receipt signs
	// (VerifySCITT only).
	Root string
}

// proofBody is the inclusion proof as served.
type proofBody struct {
	ReceiptID string   `json:"receipt_id"`
	LeafIndex uint64   `json:"leaf_index"`
	TreeSize  uint64   `json:"tree_size"`
	LeafHash  string   `json:"leaf_hash"`
	AuditPath []string `json:"audit_path"`
}

// Verify runs every check in order and returns the first failure as a
// *Failure. The checks: receipt (parse), kernel-key (pinned), receipt-signature,
// parameter-hash, checkpoint (signature by the pinned log key and origin),
// proof (it is about this receipt and this checkpoint's size), leaf-hash,
// inclusion (audit path to the checkpoint root).
//
// A receipt no reader can decode whole (nested deeper than
// schemas.MaxReceiptDepth), given bare or as the ledger serves it
// (api.UnreadableReceipt, its bytes in "raw"), goes through the same
// checks over its signed bytes (verifyUnreadable), and the Result says it
// is unreadable.
func Verify(in Inputs) (*Result, error) {
	raw, wrappedIndex, err := unwrapReceipt(in.Receipt)
	if err != nil {
		return nil, &Failure{Check: "receipt", Err: err}
	}
	var (
		r          *schemas.Receipt
		leaf       []byte
		unreadable string
	)
	// Bytes that are not JSON go through the ordinary parse, which names
	// their error; only a receipt too deep to decode needs the other way.
	if uerr := schemas.CheckReceiptReadable(raw); errors.Is(uerr, schemas.ErrReceiptTooDeep) {
		unreadable = uerr.Error()
		if r, err = verifyUnreadable(raw, in.KernelKey); err != nil {
			return nil, err
		}
		leaf = raw
	} else {
		if r, leaf, err = parseReceipt(raw); err != nil {
			return nil, &Failure{Check: "receipt", Err: err}
		}
		if err := checkReceipt(r, in.KernelKey); err != nil {
			return nil, err
		}
	}

	p, checkpoint, err := parseProof(in.Proof, in.Checkpoint, r.ID, leaf)
	if err != nil {
		return nil, err
	}
	v, err := note.NewVerifier(in.VKey)
	if err != nil {
		return nil, failf("checkpoint", "verifier key: %v", err)
	}
	cp, _, _, err := tlog.ParseCheckpoint(checkpoint, v.Name(), v)
	if err != nil {
		return nil, &Failure{Check: "checkpoint", Err: err}
	}
	var cosigners []string
	if in.Witnesses != nil {
		if _, cosigners, err = witness.VerifyCheckpoint(checkpoint, v, in.Witnesses); err != nil {
			return nil, &Failure{Check: "witnesses", Err: err}
		}
	}
	if p.TreeSize == 0 { // a tlog-proof's size is the checkpoint's
		p.TreeSize = cp.Size
	}
	switch {
	case p.ReceiptID != r.ID:
		return nil, failf("proof", "proof is for receipt %q, not %q", p.ReceiptID, r.ID)
	case p.TreeSize != cp.Size:
		return nil, failf("proof", "proof is for tree size %d, the checkpoint signs size %d", p.TreeSize, cp.Size)
	case wrappedIndex != nil && *wrappedIndex != p.LeafIndex:
		return nil, failf("proof", "proof is for leaf %d, the receipt was served as leaf %d", p.LeafIndex, *wrappedIndex)
	}
	leafHash := rfc6962.DefaultHasher.HashLeaf(leaf)
	claimed, err := schemas.ParseHash(p.LeafHash)
	if err != nil {
		return nil, &Failure{Check: "leaf-hash", Err: err}
	}
	if !bytes.Equal(claimed, leafHash) {
		return nil, failf("leaf-hash", "the receipt hashes to %s, the proof claims %s", schemas.EncodeHash(leafHash), p.LeafHash)
	}
	path := make([][]byte, len(p.AuditPath))
	for i, s := range p.AuditPath {
		if path[i], err = schemas.ParseHash(s); err != nil {
			return nil, failf("inclusion", "audit_path[%d]: %v", i, err)
		}
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.LeafIndex, cp.Size, leafHash, path, cp.Hash); err != nil {
		return nil, &Failure{Check: "inclusion", Err: err}
	}
	return &Result{ReceiptID: r.ID, LeafIndex: p.LeafIndex, TreeSize: cp.Size, Origin: cp.Origin, Verdict: r.Decision.Verdict,
		Unreadable: unreadable, Witnesses: cosigners}, nil
}

// checkReceipt runs the receipt checks after parsing: kernel-key, receipt
// (structure), receipt-signature, parameter-hash.
func checkReceipt(r *schemas.Receipt, kernelKey string) error {
	if r.KernelKey != kernelKey {
		return failf("kernel-key", "receipt is signed by %s, not the pinned kernel key", r.KernelKey)
	}
	if err := r.ReceiptBody.Validate(); err != nil {
		return &Failure{Check: "receipt", Err: err}
	}
	if err := schemas.VerifyCanonical(r.KernelKey, r.Signature, &r.ReceiptBody); err != nil {
		return &Failure{Check: "receipt-signature", Err: err}
	}
	if r.Algorithm != "" && r.Algorithm != "ed25519" {
		return failf("receipt-signature", "algorithm hint %q disagrees with an ed25519 signature", r.Algorithm)
	}
	if ph, err := schemas.ParameterHash(r.Action.Parameters); err != nil || ph != r.Action.ParameterHash {
		return failf("parameter-hash", "action.parameter_hash does not match the parameters")
	}
	return nil
}

// parseProof reads the served JSON proof or a C2SP tlog-proof, and returns
// it with the checkpoint to check it against: the one given, or the one a
// tlog-proof embeds (if both are present they must be the same note). A
// tlog-proof names no receipt and no leaf hash; they are the receipt's own,
// and the audit path then decides.
func parseProof(raw, checkpoint []byte, receiptID string, leaf []byte) (proofBody, []byte, error) {
	if tlogproof.Is(raw) {
		tp, err := tlogproof.Parse(raw)
		if err != nil {
			return proofBody{}, nil, &Failure{Check: "proof", Err: err}
		}
		if len(checkpoint) > 0 && !bytes.Equal(checkpoint, tp.Checkpoint) {
			return proofBody{}, nil, failf("proof", "the tlog-proof's checkpoint is not the checkpoint given")
		}
		p := proofBody{ReceiptID: receiptID, LeafIndex: tp.Index,
			LeafHash: schemas.EncodeHash(rfc6962.DefaultHasher.HashLeaf(leaf))}
		for _, h := range tp.Path {
			p.AuditPath = append(p.AuditPath, schemas.EncodeHash(h))
		}
		return p, tp.Checkpoint, nil
	}
	if len(checkpoint) == 0 {
		return proofBody{}, nil, failf("checkpoint", "no checkpoint given (only a tlog-proof carries its own)")
	}
	var p proofBody
	if err := schemas.DecodeStrict(raw, &p); err != nil {
		// The served body also carries the checkpoint; accept it, ignore it.
		var loose struct {
			proofBody
			Checkpoint string `json:"checkpoint"`
		}
		if err2 := schemas.DecodeStrict(raw, &loose); err2 != nil {
			return proofBody{}, nil, failf("proof", "parse: %v", err2)
		}
		p = loose.proofBody
	}
	if p.TreeSize == 0 {
		return proofBody{}, nil, failf("proof", "tree_size is missing")
	}
	return p, checkpoint, nil
}

// unwrapReceipt returns the receipt of a /v1/receipts/{id} body (the
// receipt, or the bytes of an unreadable one) with the leaf index it was
// served as, or raw itself when it is a bare receipt (a body too deep to
// decode is one).
func unwrapReceipt(raw []byte) ([]byte, *uint64, error) {
	var wrapper struct {
		Receipt    json.RawMessage `json:"receipt"`
		LeafIndex  *uint64         `json:"leaf_index"`
		Unreadable *string         `json:"unreadable"`
		Raw        []byte          `json:"raw"`
	}
	if err := json.Unmarshal(raw, &wrapper); err != nil {
		return raw, nil, nil
	}
	switch {
	case len(wrapper.Receipt) > 0:
		return wrapper.Receipt, wrapper.LeafIndex, nil
	case wrapper.Unreadable != nil:
		if len(wrapper.Raw) == 0 {
			return nil, nil, errors.New("a body marked unreadable without the receipt's raw bytes")
		}
		return wrapper.Raw, wrapper.LeafIndex, nil
	}
	return raw, nil, nil
}

// parseReceipt parses a bare receipt and returns it with its leaf bytes:
// the JCS of exactly the JSON given. The parsed receipt must re-encode to
// those same bytes, so no reader can see a field the checks did not
// (duplicate keys are refused by JCS, and a key that differs only in case
// from a receipt field makes the two differ).
func parseReceipt(raw []byte) (*schemas.Receipt, []byte, error) {
	leaf, err := schemas.CanonicalizeJSON(raw)
	if err != nil {
		return nil, nil, err
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		return nil, nil, err
	}
	again, err := schemas.CanonicalReceipt(r)
	if err != nil {
		return nil, nil, err
	}
	if !bytes.Equal(again, leaf) {
		return nil, nil, errors.New("the receipt JSON holds fields that do not round-trip (a key in another case, or a field the schema does not define)")
	}
	return r, leaf, nil
}
