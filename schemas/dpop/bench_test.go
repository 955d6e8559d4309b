package dpop_test

import (
	"testing"

	"github.com/chio-ledger/chio/schemas/dpop"
)

// BenchmarkProof is what a client pays per request: one proof signed.
func BenchmarkProof(b *testing.B) {
	s := newHolder(b, "cap-agent").signer(b, t0)
	for b.Loop() {
		if _, err := s.Proof("POST", url); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParseVerify is what a server pays per request before the
// one-time claim: parse, signature by the jwk, and the checks.
func BenchmarkParseVerify(b *testing.B) {
	h := newHolder(b, "cap-agent")
	p, err := h.signer(b, t0).Proof("POST", url)
	if err != nil {
		b.Fatal(err)
	}
	e := expect(h)
	for b.Loop() {
		pr, err := dpop.Parse(p)
		if err != nil {
			b.Fatal(err)
		}
		if err := pr.Verify(e); err != nil {
			b.Fatal(err)
		}
	}
}
