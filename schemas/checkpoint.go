package schemas

import (
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
)

// CheckpointStatementSchema is the schema tag of a kernel checkpoint body.
const CheckpointStatementSchema = "chio.checkpoint_statement.v1"

// CheckpointBody is the signed body of chio.checkpoint_statement.v1.
// Sequences are 1-based receipt positions in the log: receipt seq = leaf
// index + 1, so batch_end_seq equals tree_size.
type CheckpointBody struct {
	Schema        string `json:"schema"`
	CheckpointSeq uint64 `json:"checkpoint_seq"`
	BatchStartSeq uint64 `json:"batch_start_seq"`
	BatchEndSeq   uint64 `json:"batch_end_seq"`
	TreeSize      uint64 `json:"tree_size"`
	MerkleRoot    string `json:"merkle_root"`
	IssuedAt      uint64 `json:"issued_at"`
	KernelKey     string `json:"kernel_key"`
}

// CheckpointStatement is a kernel-signed tree head: the signature covers the
// JCS of body.
type CheckpointStatement struct {
	Body      CheckpointBody `json:"body"`
	Signature string         `json:"signature"`
}

// EncodeHash is the wire form of a Merkle hash: 0x-prefixed lowercase hex.
func EncodeHash(h []byte) string { return "0x" + hex.EncodeToString(h) }

// ParseHash decodes EncodeHash's output.
func ParseHash(s string) ([]byte, error) {
	if len(s) != 66 || s[:2] != "0x" || !isLowerHex(s[2:]) {
		return nil, fmt.Errorf("hash %q: want 0x and 64 lowercase hex", abbreviate(s))
	}
	b, _ := hex.DecodeString(s[2:])
	return b, nil
}

// Validate checks the body's structure.
func (b *CheckpointBody) Validate() error {
	switch {
	case b.Schema != CheckpointStatementSchema:
		return fmt.Errorf("checkpoint statement: schema %q, want %q", b.Schema, CheckpointStatementSchema)
	case b.CheckpointSeq == 0:
		return errors.New("checkpoint statement: checkpoint_seq starts at 1")
	case b.TreeSize == 0:
		return errors.New("checkpoint statement: tree_size must be at least 1")
	case b.BatchStartSeq == 0 || b.BatchStartSeq > b.BatchEndSeq || b.BatchEndSeq > b.TreeSize:
		return errors.New("checkpoint statement: batch sequence range is inconsistent with tree_size")
	}
	if _, err := ParseHash(b.MerkleRoot); err != nil {
		return fmt.Errorf("checkpoint statement: merkle_root: %w", err)
	}
	if _, err := ParsePublicKey(b.KernelKey); err != nil {
		return fmt.Errorf("checkpoint statement: kernel_key: %w", err)
	}
	return nil
}

// SignCheckpointStatement fills kernel_key and signs body.
func SignCheckpointStatement(priv ed25519.PrivateKey, body CheckpointBody) (*CheckpointStatement, error) {
	body.Schema = CheckpointStatementSchema
	body.KernelKey = EncodePublicKey(priv.Public().(ed25519.PublicKey))
	if err := body.Validate(); err != nil {
		return nil, err
	}
	sig, err := SignCanonical(priv, &body)
	if err != nil {
		return nil, fmt.Errorf("sign checkpoint statement %d: %w", body.CheckpointSeq, err)
	}
	return &CheckpointStatement{Body: body, Signature: sig}, nil
}

// Verify checks the statement's structure and signature against its own
// kernel_key; pinning that key is the caller's job.
func (s *CheckpointStatement) Verify() error {
	if err := s.Body.Validate(); err != nil {
		return err
	}
	if err := VerifyCanonical(s.Body.KernelKey, s.Signature, &s.Body); err != nil {
		return fmt.Errorf("checkpoint statement signature: %w", err)
	}
	return nil
}
