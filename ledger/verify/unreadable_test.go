package verify

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/schemas"
)

// TestUnreadableReceiptVerifies: a receipt nested too deep for any reader
// (arguments 9,999 levels deep, the receipt two more) is checked over its
// signed bytes, bare or as the ledger serves it, and each check still
// fails what it should.
func TestUnreadableReceiptVerifies(t *testing.T) {
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	skey, vkey, _ := note.GenerateKey(rand.Reader, "verify.test/log")
	signer, _ := note.NewSigner(skey)
	sign := func(key ed25519.PrivateKey) []byte {
		leaf, err := schemas.SignReceiptLeaf(key, schemas.ReceiptBody{ID: "r-deep", Timestamp: 1, CapabilityID: "c",
			ToolServer: "s", ToolName: "t", Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`)},
			Decision:    schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "invalid capability token", Guard: "capability"},
			ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated, Metadata: json.RawMessage(`{"note":"n"}`)})
		if err != nil {
			t.Fatal(err)
		}
		return leaf
	}
	leaf := sign(kernel)
	if json.Valid(leaf) {
		t.Fatal("the fixture is meant to be beyond encoding/json")
	}
	// A one-leaf log of it: the root is the leaf hash, the path empty.
	leafHash := rfc6962.DefaultHasher.HashLeaf(leaf)
	cp, _ := note.Sign(&note.Note{Text: string((&tlog.Checkpoint{Origin: "verify.test/log", Size: 1, Hash: leafHash}).Marshal())}, signer)
	proof, _ := json.Marshal(map[string]any{"receipt_id": "r-deep", "leaf_index": 0, "tree_size": 1,
		"leaf_hash": schemas.EncodeHash(leafHash), "audit_path": []string{}})
	served := func(raw []byte) []byte {
		b, _ := json.Marshal(map[string]any{"receipt_id": "r-deep", "leaf_index": 0, "unreadable": "nested deeper than 256 levels", "raw": raw})
		return b
	}
	sig := bytes.Index(leaf, []byte(`"signature":"`)) + len(`"signature":"`)
	tampered := bytes.Clone(leaf)
	tampered[sig] ^= 1 // one hex digit for another
	cases := []struct {
		name    string
		receipt []byte
		failed  string // the failing check; "" passes
	}{
		{"bare", leaf, ""},
		{"as served", served(leaf), ""},
		{"served without its bytes", []byte(`{"receipt_id":"r-deep","leaf_index":0,"unreadable":"x"}`), "receipt"},
		{"signature tampered", tampered, "receipt-signature"},
		{"another kernel", sign(other), "kernel-key"},
		{"not canonical", append([]byte("{ "), leaf[1:]...), "receipt"},
		{"a member no receipt has", append(bytes.Clone(leaf[:len(leaf)-1]), `,"zz":1}`...), "receipt"},
		{"members out of order", append([]byte(`{"trust_level":"mediated",`), bytes.Replace(leaf[1:], []byte(`,"trust_level":"mediated"`), nil, 1)...), "receipt"},
		{"a member repeated", append(bytes.Clone(leaf[:len(leaf)-1]), `,"trust_level":"mediated"}`...), "receipt"},
		{"unterminated", leaf[:len(leaf)-1], "receipt"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := Verify(Inputs{Receipt: c.receipt, Proof: proof, Checkpoint: cp, VKey: vkey,
				KernelKey: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))})
			var f *Failure
			switch {
			case c.failed == "" && err != nil:
				t.Fatal(err)
			case c.failed == "" && (res.ReceiptID != "r-deep" || res.Verdict != schemas.VerdictDeny || res.Unreadable != schemas.ErrReceiptTooDeep.Error()):
				t.Fatalf("%+v", res)
			case c.failed != "" && (!errors.As(err, &f) || f.Check != c.failed):
				t.Fatalf("%v, want the %s check to fail", err, c.failed)
			}
		})
	}
}
