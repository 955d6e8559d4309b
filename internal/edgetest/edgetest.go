// Package edgetest issues certified edges for tests: a fresh edge key and
// a chio.edge_credential.v1 for it, valid from a minute ago for an hour.
package edgetest

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// Certified returns the signer of edge id, its credential (id "edge."+id)
// issued by issuer.
func Certified(t testing.TB, issuer ed25519.PrivateKey, id string) *schemas.EdgeSigner {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(time.Now().Unix())
	cred, err := schemas.IssueEdgeCredential(issuer, schemas.EdgeCredentialBody{ID: "edge." + id, EdgeID: id,
		PublicKey: schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)), IssuedAt: now - 60, ExpiresAt: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schemas.NewEdgeSigner(cred, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
