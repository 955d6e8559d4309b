package a2aadapter

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// TestCallChainReachesThePartner: with a PartnerServerID, the partner sees
// metadata.chio.governedIntent naming (PartnerServerID, skill id) whose
// chain extends the caller's: never replaced, never restarted.
func TestCallChainReachesThePartner(t *testing.T) {
	receipt := uuid.Must(uuid.NewV7()).String()
	parentReceipt := uuid.Must(uuid.NewV7()).String()
	for _, tc := range []struct {
		name  string
		gov   *tools.Governance
		want  *schemas.CallChain
		purp  string
		error error
	}{
		{name: "extends the caller's chain",
			gov: &tools.Governance{RequestID: "req-b", ReceiptID: receipt, Subject: "key-b", Intent: &schemas.GovernedIntent{
				ID: "intent-b", ServerID: "a2a:x", ToolName: "echo", Purpose: "research for org a",
				CallChain: &schemas.CallChain{ChainID: "chain-a", ParentRequestID: "req-a", ParentReceiptID: parentReceipt,
					OriginSubject: "key-a", DelegatorSubject: "key-a"}}},
			want: &schemas.CallChain{ChainID: "chain-a", ParentRequestID: "req-b", ParentReceiptID: receipt,
				OriginSubject: "key-a", DelegatorSubject: "key-b"},
			purp: "research for org a"},
		{name: "roots a chain at a call without one",
			gov:  &tools.Governance{RequestID: "req-b", ReceiptID: receipt, Subject: "key-b"},
			want: &schemas.CallChain{ChainID: receipt, ParentRequestID: "req-b", ParentReceiptID: receipt, OriginSubject: "key-b", DelegatorSubject: "key-b"}},
		{name: "refuses a call without governance", gov: nil, error: ErrNoGovernance},
		{name: "refuses a call without a subject", gov: &tools.Governance{RequestID: "req-b", ReceiptID: receipt}, error: ErrNoGovernance},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startPartner(t, partnerOpts{})
			a := discover(t, p, Config{PartnerServerID: "chio-partner"})
			inv := call(a, "echo", `{"message":"hi"}`)
			inv.Governance = tc.gov
			_, err := a.Invoke(t.Context(), inv)
			if tc.error != nil {
				if !errors.Is(err, tc.error) || p.requests.Load() != 0 {
					t.Fatalf("err = %v after %d partner requests, want %v and none", err, p.requests.Load(), tc.error)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			meta, _ := p.agent.calls()[0].messageMeta["chio"].(map[string]any)
			raw, err := json.Marshal(meta["governedIntent"])
			if err != nil {
				t.Fatal(err)
			}
			// The partner edge decodes it strictly: it must be exactly an intent.
			got, err := schemas.DecodeGovernedIntent(raw)
			if err != nil {
				t.Fatalf("governed intent %s: %v", raw, err)
			}
			if err := got.Validate(inv.ID, "chio-partner", "echo"); err != nil {
				t.Fatalf("intent does not fit the partner's call: %v", err)
			}
			if *got.CallChain != *tc.want {
				t.Fatalf("chain %+v, want %+v", *got.CallChain, *tc.want)
			}
			if tc.purp != "" && got.Purpose != tc.purp {
				t.Fatalf("purpose %q, want the caller's %q", got.Purpose, tc.purp)
			}
		})
	}
}
