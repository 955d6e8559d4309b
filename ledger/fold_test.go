package ledger

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// jsonObjectOfSize returns a JSON object {key: s} whose canonical form has
// exactly n bytes.
func jsonObjectOfSize(t *testing.T, key string, n int) json.RawMessage {
	t.Helper()
	overhead := len(`{"` + key + `":""}`)
	raw := json.RawMessage(fmt.Sprintf(`{%q:%q}`, key, strings.Repeat("x", n-overhead)))
	c, err := schemas.CanonicalizeJSON(raw)
	if err != nil || len(c) != n {
		t.Fatalf("canonical size %d, %v", len(c), err)
	}
	return raw
}

// The largest events that validate still fold into a receipt that fits in
// a C2SP entry bundle (65,535 bytes): validation is the only gate, so an
// accepted event can never stop the ledger.
func TestLargestEventsFitInALeaf(t *testing.T) {
	id := strings.Repeat("r", schemas.MaxIDLength)
	name := strings.Repeat("n", 256)
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id, Timestamp: 1,
		CapabilityID: name, ToolServer: name, ToolName: name,
		Parameters: jsonObjectOfSize(t, "p", schemas.MaxParametersBytes), Metadata: jsonObjectOfSize(t, "m", schemas.MaxMetadataBytes),
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: strings.Repeat("h", 64), TenantID: strings.Repeat("\u0001", 100)}
	// Grow the evidence until the decision's text bound is reached.
	for i := 0; i < schemas.MaxEvidence; i++ {
		d.Evidence = append(d.Evidence, schemas.GuardEvidence{GuardName: "g", Verdict: true})
		if d.Validate() != nil {
			d.Evidence = d.Evidence[:i]
			break
		}
		for len(d.Evidence[i].Details) < schemas.MaxTextBytes {
			d.Evidence[i].Details += "\u0002\u0002\u0002\u0002"
			if d.Validate() != nil {
				d.Evidence[i].Details = d.Evidence[i].Details[:len(d.Evidence[i].Details)-4]
				break
			}
		}
	}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	o := schemas.OutcomeEvent{Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(id), ReceiptID: id, Timestamp: 1 << 40,
		Outcome: schemas.OutcomeFailed, ContentHash: schemas.EmptyContentHash, Reason: strings.Repeat("\u0003", schemas.MaxTextBytes),
		Metadata: jsonObjectOfSize(t, "n", schemas.MaxMetadataBytes)}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	_, key, _ := ed25519.GenerateKey(rand.Reader)
	for _, b := range []*schemas.ReceiptBody{bodyFromOutcome(&d, &o), bodyFromDecision(&d, schemas.Decision{Verdict: schemas.VerdictDeny,
		Reason: strings.Repeat("\u0004", schemas.MaxTextBytes), Guard: strings.Repeat("\u0005", schemas.MaxTextBytes)}, 1, schemas.EmptyContentHash)} {
		leaf, err := schemas.SignReceiptLeaf(key, *b)
		if err != nil {
			t.Fatal(err)
		}
		if len(leaf) > schemas.MaxEncodedReceipt {
			t.Fatalf("leaf of %d bytes exceeds %d", len(leaf), schemas.MaxEncodedReceipt)
		}
		t.Logf("largest leaf: %d bytes", len(leaf))
	}
}

// Events the JCS library cannot canonicalize are rejected by validation,
// so the fold skips them instead of failing to sign.
func TestUncanonicalizableEventsAreMalformed(t *testing.T) {
	for _, params := range []string{`{"a":1,"a":2}`, `{"a":1e400}`, `{"a":"\ud800"}`} {
		d := decisionEvent(newCall(schemas.VerdictDeny, ""), 1)
		d.Parameters = json.RawMessage(params)
		if err := d.Validate(); err == nil {
			t.Errorf("parameters %s validate", params)
		}
		d.Parameters, d.Metadata = json.RawMessage(`{}`), json.RawMessage(params)
		if err := d.Validate(); err == nil {
			t.Errorf("metadata %s validates", params)
		}
	}
}
