package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/schemas"
)

// The proofs section must not be able to time a broken endpoint: a served
// proof verifies, a tampered one or one for another leaf does not, and an
// unknown id is an error rather than a fast 404.
func TestProofsVerifyRejectsBadProofs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := openProofsLog(filepath.Join(t.TempDir(), "log"), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if err := l.grow(ctx, 250); err != nil {
		t.Fatal(err)
	}
	if err := l.grow(ctx, 300); err != nil { // a second step appends to the same log
		t.Fatal(err)
	}
	if got := len(l.ids); got != 300 {
		t.Fatalf("%d ids for 300 leaves", got)
	}
	srv, err := serveProofs(l, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close(ctx)

	body, err := srv.get(ctx, proofsPath(l.ids[137].String()), true)
	if err != nil {
		t.Fatal(err)
	}
	n, err := srv.verify(ctx, 137, 300, body)
	if err != nil {
		t.Fatalf("served proof does not verify: %v", err)
	}
	if n < 8 || n > 9 {
		t.Fatalf("audit path of %d hashes in a tree of 300", n)
	}
	if _, err := srv.verify(ctx, 138, 300, body); err == nil {
		t.Fatal("a proof of leaf 137 verified as leaf 138")
	}
	if _, err := srv.verify(ctx, 137, 299, body); err == nil {
		t.Fatal("a proof in a tree of 300 verified as one in a tree of 299")
	}
	var p api.InclusionProof
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	p.AuditPath[0] = schemas.EncodeHash(make([]byte, 32))
	bad, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.verify(ctx, 137, 300, bad); err == nil || !strings.Contains(err.Error(), "inclusion") {
		t.Fatalf("tampered audit path: %v", err)
	}
	if _, err := srv.get(ctx, proofsPath("0198a0c4-0000-7000-8000-000000000000"), false); err == nil {
		t.Fatal("a proof of an unknown receipt was served")
	}
}

// The limits section's receipt is a valid, verifiable receipt of about a
// kilobyte, signed by the ledger's signing path.
func TestLimitsSampleReceipt(t *testing.T) {
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf, msg, err := limitsSampleReceipt(key)
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf) < 800 || len(leaf) > 2000 || len(msg) >= len(leaf) {
		t.Fatalf("leaf %d bytes, signing input %d bytes", len(leaf), len(msg))
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		t.Fatal(err)
	}
	if !ed25519.Verify(key.Public().(ed25519.PublicKey), msg, mustSig(t, r.Signature)) {
		t.Fatal("the signing input is not what was signed")
	}
}

func mustSig(t *testing.T, s string) []byte {
	t.Helper()
	b, err := schemas.ParseSignature(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
