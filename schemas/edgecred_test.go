package schemas_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/edgetest"
	"github.com/chio-ledger/chio/schemas"
)

func edgeSigner(t testing.TB, issuer ed25519.PrivateKey, issued, expires uint64) *schemas.EdgeSigner {
	t.Helper()
	return edgetest.CertifiedFor(t, issuer, "e1", issued, expires)
}

// TestEdgeSignatures: a message verifies under its credential only as it
// was signed, within the credential's window, and the credential only
// under its issuer.
func TestEdgeSignatures(t *testing.T) {
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	s := edgeSigner(t, issuer, 100, 200)
	header, sig := s.Sign(schemas.SubjectDecision, []byte(`{"a":1}`))
	cred, err := schemas.ParseEdgeHeader(header)
	if err != nil {
		t.Fatal(err)
	}
	issuerKey := schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))
	if err := cred.Verify(func(k string) bool { return k == issuerKey }); err != nil {
		t.Fatalf("genuine credential: %v", err)
	}
	otherKey := schemas.EncodePublicKey(other.Public().(ed25519.PublicKey))
	if err := cred.Verify(func(k string) bool { return k == otherKey }); !errors.Is(err, schemas.ErrEdgeIssuer) {
		t.Fatalf("credential under an untrusted issuer: %v", err)
	}
	tampered := *cred
	tampered.EdgeID = "e2"
	if err := tampered.Verify(func(k string) bool { return k == issuerKey }); !errors.Is(err, schemas.ErrEdgeIssuer) {
		t.Fatalf("altered credential: %v", err)
	}
	for _, c := range []struct {
		name          string
		subject, data string
		at            uint64
		want          error
	}{
		{"as signed", schemas.SubjectDecision, `{"a":1}`, 150, nil},
		{"other body", schemas.SubjectDecision, `{"a":2}`, 150, schemas.ErrEdgeSignature},
		{"other subject", schemas.SubjectOutcome, `{"a":1}`, 150, schemas.ErrEdgeSignature},
		{"before its window", schemas.SubjectDecision, `{"a":1}`, 99, schemas.ErrEdgeExpired},
		{"after its window", schemas.SubjectDecision, `{"a":1}`, 200, schemas.ErrEdgeExpired},
	} {
		if err := schemas.VerifyEdgeMessage(cred, sig, c.subject, []byte(c.data), c.at); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	// Hostile forms of a genuine credential: a duplicate member, a case
	// variant, an unknown member. The genuine one reads.
	genuine, err := json.Marshal(cred)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schemas.ParseEdgeCredential(genuine); err != nil {
		t.Fatalf("genuine credential: %v", err)
	}
	body := strings.TrimSuffix(string(genuine), "}")
	for _, raw := range []string{
		body + `,"edge_id":"e2"}`,
		strings.Replace(string(genuine), `"edge_id"`, `"Edge_ID"`, 1),
		body + `,"extra":1}`,
	} {
		if _, err := schemas.ParseEdgeCredential([]byte(raw)); err == nil {
			t.Errorf("credential %s was read", raw)
		}
	}
	if _, err := schemas.ParseEdgeHeader("not base64!"); !errors.Is(err, schemas.ErrEdgeCredential) {
		t.Errorf("garbage header: %v", err)
	}
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := schemas.NewEdgeSigner(cred, stranger); err == nil {
		t.Error("a key that is not the credential's signs")
	}
}

// BenchmarkEdgeSign is an edge's cost per message written.
func BenchmarkEdgeSign(b *testing.B) {
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	s := edgeSigner(b, issuer, 1, 2)
	data := make([]byte, 1500) // about one decision event
	for b.Loop() {
		s.Sign(schemas.SubjectDecision, data)
	}
}
