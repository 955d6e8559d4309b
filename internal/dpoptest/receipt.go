package dpoptest

import (
	"crypto/ed25519"
	"encoding/json"
	"testing"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// JKT is the RFC 7638 thumbprint of key's public half, as a receipt's
// binding records the proving key.
func JKT(key ed25519.PrivateKey) string { return dpop.Thumbprint(key.Public().(ed25519.PublicKey)) }

// Binding is a decision event's metadata.attribution.binding: its method
// and, for a proof, the jkt of the key that made it (nil when the event
// records none).
func Binding(t testing.TB, ev schemas.DecisionEvent) map[string]string {
	t.Helper()
	var m struct {
		Attribution struct {
			Binding map[string]string `json:"binding"`
		} `json:"attribution"`
	}
	if err := json.Unmarshal(ev.Metadata, &m); err != nil {
		t.Fatalf("metadata %s: %v", ev.Metadata, err)
	}
	return m.Attribution.Binding
}

// WantDeny checks that the receipt rid of a refused call is a deny at the
// proof step guard (the kernel's) whose reason names check: a deny
// decision there, or an allowed decision closed by an outcome refused
// there (a proof found spent after the decision was written). decisions
// and outcomes are the events by receipt id (natstest.Decisions,
// natstest.Outcomes).
func WantDeny(t testing.TB, decisions map[string]schemas.DecisionEvent, outcomes map[string]schemas.OutcomeEvent,
	rid, guard string, check dpop.Check) {
	t.Helper()
	ev, ok := decisions[rid]
	if !ok {
		t.Fatalf("no decision for receipt %q", rid)
	}
	reason := ev.Decision.Reason
	if ev.Decision.Verdict == schemas.VerdictAllow {
		o, ok := outcomes[rid]
		if !ok || o.Outcome != schemas.OutcomeRefused || o.Guard != guard {
			t.Fatalf("allowed decision %+v without its refused outcome %+v", ev.Decision, o)
		}
		reason = o.Reason
	} else if ev.Decision.Guard != guard {
		t.Fatalf("deny %+v", ev.Decision)
	}
	if dpop.CheckOf(reason) != check {
		t.Fatalf("receipt reason %q, want check %s", reason, check)
	}
}
