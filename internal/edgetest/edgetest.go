// Package edgetest issues certified edges for tests: a fresh edge key and
// a chio.edge_credential.v1 for it.
package edgetest

import (
	"crypto/ed25519"
	"crypto/rand"
	"testing"
	"time"

	"github.com/chio-ledger/chio/schemas"
)

// Certified returns the signer of edge id, its credential (id "edge."+id)
// issued by issuer, valid from a minute ago for an hour.
func Certified(t testing.TB, issuer ed25519.PrivateKey, id string) *schemas.EdgeSigner {
	t.Helper()
	now := uint64(time.Now().Unix())
	return CertifiedFor(t, issuer, id, now-60, now+3600)
}

// CertifiedFor is Certified with the credential valid from issued until
// expires (unix seconds).
func CertifiedFor(t testing.TB, issuer ed25519.PrivateKey, id string, issued, expires uint64) *schemas.EdgeSigner {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cred, err := schemas.IssueEdgeCredential(issuer, schemas.EdgeCredentialBody{ID: "edge." + id, EdgeID: id,
		PublicKey: schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)), IssuedAt: issued, ExpiresAt: expires})
	if err != nil {
		t.Fatal(err)
	}
	s, err := schemas.NewEdgeSigner(cred, key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
