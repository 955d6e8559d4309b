package verify

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/tlogproof"
	"github.com/chio-ledger/chio/schemas"
)

// fixture builds a 5-leaf tree of signed receipts, a checkpoint for it and
// the served form of leaf 2's proof, independently of the ledger.
func fixture(t *testing.T) (Inputs, [][]byte) {
	t.Helper()
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "verify.test/log")
	signer, _ := note.NewSigner(skey)
	var leaves [][]byte
	for i := 0; i < 5; i++ {
		leaf, err := schemas.SignReceiptLeaf(kernel, schemas.ReceiptBody{ID: fmt.Sprintf("r%d", i), Timestamp: 1, CapabilityID: "c",
			ToolServer: "s", ToolName: "t", Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{"i":1}`)},
			Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, ContentHash: schemas.EmptyContentHash, PolicyHash: "p",
			TrustLevel: schemas.TrustMediated})
		if err != nil {
			t.Fatal(err)
		}
		leaves = append(leaves, leaf)
	}
	hashes := make([][]byte, len(leaves))
	for i, l := range leaves {
		hashes[i] = rfc6962.DefaultHasher.HashLeaf(l)
	}
	root := mth(hashes)
	cp := tlog.Checkpoint{Origin: "verify.test/log", Size: 5, Hash: root}
	signed, _ := note.Sign(&note.Note{Text: string(cp.Marshal())}, signer)
	path := inclusionPath(2, hashes)
	p := map[string]any{"receipt_id": "r2", "leaf_index": 2, "tree_size": 5, "leaf_hash": schemas.EncodeHash(hashes[2]),
		"audit_path": path, "checkpoint": string(signed)}
	pj, _ := json.Marshal(p)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, 2, 5, hashes[2], decodeAll(path), root); err != nil {
		t.Fatal(err)
	}
	return Inputs{Receipt: leaves[2], Proof: pj, Checkpoint: signed, VKey: vkey,
		KernelKey: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))}, leaves
}

func mth(h [][]byte) []byte {
	if len(h) == 1 {
		return h[0]
	}
	k := 1
	for k*2 < len(h) {
		k *= 2
	}
	return rfc6962.DefaultHasher.HashChildren(mth(h[:k]), mth(h[k:]))
}

// inclusionPath is the RFC 6962 PATH(m, D[n]) computed recursively.
func inclusionPath(m int, h [][]byte) []string {
	if len(h) <= 1 {
		return nil
	}
	k := 1
	for k*2 < len(h) {
		k *= 2
	}
	if m < k {
		return append(inclusionPath(m, h[:k]), schemas.EncodeHash(mth(h[k:])))
	}
	return append(inclusionPath(m-k, h[k:]), schemas.EncodeHash(mth(h[:k])))
}

func decodeAll(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i], _ = schemas.ParseHash(s)
	}
	return out
}

func TestVerify(t *testing.T) {
	good, leaves := fixture(t)
	if res, err := Verify(good); err != nil || res.LeafIndex != 2 || res.TreeSize != 5 {
		t.Fatalf("good inputs: %+v %v", res, err)
	}
	wrapped, _ := json.Marshal(map[string]any{"receipt": json.RawMessage(good.Receipt), "leaf_index": 2})
	if _, err := Verify(Inputs{Receipt: wrapped, Proof: good.Proof, Checkpoint: good.Checkpoint, VKey: good.VKey, KernelKey: good.KernelKey}); err != nil {
		t.Fatalf("served receipt body: %v", err)
	}
	// The same proof as a C2SP tlog-proof, with and without --checkpoint.
	var served struct {
		LeafIndex uint64   `json:"leaf_index"`
		AuditPath []string `json:"audit_path"`
	}
	_ = json.Unmarshal(good.Proof, &served)
	tp := (&tlogproof.Proof{Index: served.LeafIndex, Path: decodeAll(served.AuditPath), Checkpoint: good.Checkpoint}).Marshal()
	for _, cp := range [][]byte{nil, good.Checkpoint} {
		if _, err := Verify(Inputs{Receipt: good.Receipt, Proof: tp, Checkpoint: cp, VKey: good.VKey, KernelKey: good.KernelKey}); err != nil {
			t.Fatalf("tlog-proof (checkpoint given: %v): %v", cp != nil, err)
		}
	}
	if _, err := Verify(Inputs{Receipt: leaves[3], Proof: tp, VKey: good.VKey, KernelKey: good.KernelKey}); err == nil {
		t.Fatal("a tlog-proof of leaf 2 verified leaf 3")
	}
	if _, err := Verify(Inputs{Receipt: good.Receipt, Proof: tp, Checkpoint: []byte("x"), VKey: good.VKey, KernelKey: good.KernelKey}); err == nil {
		t.Fatal("a tlog-proof verified against a different --checkpoint")
	}
	_, otherV, _ := note.GenerateKey(rand.Reader, "verify.test/log")
	mod := func(f func(in *Inputs)) Inputs { in := good; f(&in); return in }
	cases := []struct {
		name  string
		in    Inputs
		check string
	}{
		{"receipt of another leaf", mod(func(in *Inputs) { in.Receipt = leaves[3] }), "proof"},
		{"tampered receipt", mod(func(in *Inputs) {
			in.Receipt = []byte(strings.Replace(string(good.Receipt), `"tool_name":"t"`, `"tool_name":"u"`, 1))
		}), "receipt-signature"},
		{"unpinned kernel key", mod(func(in *Inputs) { in.KernelKey = strings.Repeat("0", 64) }), "kernel-key"},
		{"other log key", mod(func(in *Inputs) { in.VKey = otherV }), "checkpoint"},
		{"garbage checkpoint", mod(func(in *Inputs) { in.Checkpoint = []byte("hello\n") }), "checkpoint"},
		{"wrong leaf index", mod(func(in *Inputs) {
			in.Proof = []byte(strings.Replace(string(good.Proof), `"leaf_index":2`, `"leaf_index":3`, 1))
		}), "inclusion"},
		{"short audit path", mod(func(in *Inputs) {
			var p map[string]any
			_ = json.Unmarshal(good.Proof, &p)
			p["audit_path"] = p["audit_path"].([]any)[:1]
			in.Proof, _ = json.Marshal(p)
		}), "inclusion"},
		{"not json", mod(func(in *Inputs) { in.Receipt = []byte("{") }), "receipt"},
		{"case-variant key", mod(func(in *Inputs) {
			in.Receipt = []byte(strings.Replace(string(good.Receipt), `"decision":{"verdict":"allow"}`, `"decision":{"verdict":"allow"},"DECISION":{"verdict":"deny","reason":"r","guard":"g"}`, 1))
		}), "receipt"},
		{"duplicate key", mod(func(in *Inputs) {
			in.Receipt = []byte(strings.Replace(string(good.Receipt), `"decision":{"verdict":"allow"}`, `"decision":{"verdict":"allow"},"decision":{"verdict":"allow"}`, 1))
		}), "receipt"},
		{"proof not json", mod(func(in *Inputs) { in.Proof = []byte("[]") }), "proof"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Verify(c.in)
			var f *Failure
			if !errors.As(err, &f) || f.Check != c.check {
				t.Fatalf("want failure of %q, got %v", c.check, err)
			}
		})
	}
}
