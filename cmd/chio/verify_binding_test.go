package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// TestVerifyPrintsBinding: chio verify prints how the caller of a receipt
// that verifies was bound, from its signed metadata.attribution.binding.
// Each receipt is the one leaf of its own log, signed and checkpointed
// independently of the ledger.
func TestVerifyPrintsBinding(t *testing.T) {
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	kernelPub := schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))
	subjectPub, _, _ := ed25519.GenerateKey(rand.Reader)
	subject := schemas.EncodePublicKey(subjectPub)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	jkt := dpop.Thumbprint(subjectPub)
	const origin = "verify-binding.test/log"
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name    string
		binding any // nil: none recorded
		wrapped bool
		want    string
	}{
		{"dpop", map[string]any{"method": "dpop", "jkt": jkt}, false, "binding: dpop (jkt " + jkt + ", the subject key's)"},
		{"tool proof", map[string]any{"method": "chio_dpop_v1", "jkt": jkt}, true, "binding: chio_dpop_v1 (jkt " + jkt + ", the subject key's)"},
		{"bearer", map[string]any{"method": "bearer"}, false, "binding: bearer"},
		{"none recorded", nil, true, "binding: none recorded"},
		{"jkt of another key", map[string]any{"method": "dpop", "jkt": dpop.Thumbprint(otherPub)}, false,
			"binding: dpop (jkt " + dpop.Thumbprint(otherPub) + ", NOT the thumbprint of the subject key " + subject + ")"},
		{"unknown method", map[string]any{"method": "mtls\n"}, false, `binding: unknown method "mtls\n"`},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			attr := map[string]any{"subject_key": subject, "issuer_key": subject, "delegation_depth": 0, "grant_index": 0}
			if c.binding != nil {
				attr["binding"] = c.binding
			}
			meta, _ := json.Marshal(map[string]any{"attribution": attr})
			id := "r-binding-" + string(rune('a'+i))
			leaf, err := schemas.SignReceiptLeaf(kernel, schemas.ReceiptBody{ID: id, Timestamp: 1, CapabilityID: "cap-1",
				ToolServer: "srv", ToolName: "tool", Action: schemas.ToolCallAction{Parameters: json.RawMessage(`{}`)},
				Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, ContentHash: schemas.EmptyContentHash,
				PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated, Metadata: meta})
			if err != nil {
				t.Fatal(err)
			}
			// A one-leaf tree: the root is the leaf hash, the audit path empty.
			leafHash := rfc6962.DefaultHasher.HashLeaf(leaf)
			cp := tlog.Checkpoint{Origin: origin, Size: 1, Hash: leafHash}
			signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, signer)
			if err != nil {
				t.Fatal(err)
			}
			proof, _ := json.Marshal(map[string]any{"receipt_id": id, "leaf_index": 0, "tree_size": 1,
				"leaf_hash": schemas.EncodeHash(leafHash), "audit_path": []string{}, "checkpoint": string(signed)})
			receipt := leaf
			if c.wrapped { // the /v1/receipts/{id} body
				receipt, _ = json.Marshal(map[string]any{"receipt": json.RawMessage(leaf), "leaf_index": 0})
			}
			out, err := chio(context.Background(), "verify", "--receipt", write(id+".json", receipt), "--proof", write(id+".proof", proof),
				"--checkpoint", write(id+".cp", signed), "--vkey", vkey, "--kernel-key", kernelPub)
			if err != nil || !strings.Contains(out, "verify: OK receipt "+id) {
				t.Fatalf("verify: %v\n%s", err, out)
			}
			if !strings.Contains(out, "\n"+c.want+"\n") {
				t.Errorf("output lacks %q:\n%s", c.want, out)
			}
		})
	}
}
