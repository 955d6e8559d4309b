package ledger

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// fuzzSubjects are the subjects the fuzzed message arrives on: the three
// event kinds, an envelope of them, and one the ledger does not know.
var fuzzSubjects = []string{schemas.SubjectDecision, schemas.SubjectOutcome, schemas.SubjectTimeout,
	schemas.SubjectEnvelope, "chio.events.unknown"}

// largestDecision is an allow decision at the limits validation allows,
// for the receipts a fuzzed outcome or timeout completes: its parameters
// and metadata fill their canonical budgets, its names, policy hash,
// tenant and evidence the decision's text budget.
func largestDecision(tb testing.TB) schemas.DecisionEvent {
	tb.Helper()
	name := strings.Repeat("n", 256)
	params, _ := json.Marshal(map[string]string{"p": strings.Repeat("x", schemas.MaxParametersBytes-8)})
	meta, _ := json.Marshal(map[string]string{"k": strings.Repeat("m", schemas.MaxMetadataBytes-8)})
	d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID("r"), ReceiptID: "r",
		Timestamp: 1, CapabilityID: name, ToolServer: name, ToolName: name, Parameters: params,
		Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: strings.Repeat("h", 1000), Metadata: meta,
		TenantID: strings.Repeat("t", 1000), RequestID: name, TaskID: name, EdgeID: name, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	if err := d.Validate(); err != nil {
		tb.Fatalf("the largest decision does not validate: %v", err)
	}
	// As much evidence as the text budget takes.
	for len(d.Evidence) < schemas.MaxEvidence {
		d.Evidence = append(d.Evidence, schemas.GuardEvidence{GuardName: "g", Details: strings.Repeat("d", 1000)})
		if d.Validate() != nil {
			d.Evidence = d.Evidence[:len(d.Evidence)-1]
			break
		}
	}
	return d
}

// decisionFor is the largest decision with the receipt id of a fuzzed
// outcome or timeout.
func decisionFor(largest schemas.DecisionEvent, receiptID string) *schemas.DecisionEvent {
	largest.ReceiptID, largest.EventID = receiptID, schemas.DecisionEventID(receiptID)
	return &largest
}

// FuzzDecode runs one stream message through the ledger's decode path:
// expand (envelopes) and decode (parse and validate each event).
// Properties:
//   - a message on an event subject expands to itself; an envelope to the
//     events UnpackEvents finds, or to nothing when it is malformed;
//   - each event is either skipped, leaving nothing set, or decoded into
//     exactly the kind its subject names, valid, with the ids the log keys
//     on taken from it and bound together (event id = receipt id + suffix);
//   - an allow decision's open-call record, its own bytes wrapped as
//     {"decision": ...}, is JSON that decodes to the same decision;
//   - an outcome or timeout that decodes completes the largest decision
//     validation admits into a receipt that signs, fits an entry bundle,
//     parses and verifies, and keeps the decision's metadata over the
//     outcome's.
func FuzzDecode(f *testing.F) {
	done := call{id: "r-1", verdict: schemas.VerdictAllow, outcome: schemas.OutcomeCompleted, params: json.RawMessage(`{"path":"docs/a.txt"}`)}
	deny := call{id: "r-2", verdict: schemas.VerdictDeny, params: json.RawMessage(`{"a":[1,2.5,"x"]}`)}
	refused := call{id: "r-3", verdict: schemas.VerdictAllow, outcome: schemas.OutcomeRefused, params: json.RawMessage(`{}`)}
	timeout := schemas.TimeoutEvent{Schema: schemas.TimeoutEventSchema, EventID: schemas.TimeoutEventID("r-1"), ReceiptID: "r-1", Timestamp: 7, Reason: "no outcome"}
	f.Add(uint8(0), mustJSON(decisionEvent(done, 1)))
	f.Add(uint8(0), mustJSON(decisionEvent(deny, 1)))
	f.Add(uint8(1), mustJSON(outcomeEvent(done, 2)))
	f.Add(uint8(1), mustJSON(outcomeEvent(refused, 2)))
	f.Add(uint8(2), mustJSON(timeout))
	f.Add(uint8(1), []byte(`{"schema":"chio.event.outcome.v1","event_id":"r.outcome","receipt_id":"r","timestamp":2,"outcome":"completed","content_hash":"`+
		schemas.EmptyContentHash+`","metadata":{"k":"outcome","governed_transaction":{"x":1},"\u0067overned":2}}`))
	env, err := schemas.PackEvents([]schemas.StreamEvent{
		{Subject: schemas.SubjectDecision, Data: mustJSON(decisionEvent(done, 1))},
		{Subject: schemas.SubjectOutcome, Data: mustJSON(outcomeEvent(done, 2))},
		{Subject: schemas.SubjectTimeout, Data: mustJSON(timeout)},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(uint8(3), env)
	f.Add(uint8(4), mustJSON(decisionEvent(done, 1)))

	_, key, _ := ed25519.GenerateKey(nil)
	log := slog.New(slog.DiscardHandler)
	largest := largestDecision(f)
	f.Fuzz(func(t *testing.T, subject uint8, data []byte) {
		msg := event{seq: 1, subject: fuzzSubjects[int(subject)%len(fuzzSubjects)], data: data}
		events := expand(log, []event{msg})
		if msg.subject == schemas.SubjectEnvelope {
			evs, err := schemas.UnpackEvents(msg.subject, data)
			if err != nil && len(events) != 0 || err == nil && len(events) != len(evs) {
				t.Fatalf("envelope expands to %d events; UnpackEvents: %d, %v", len(events), len(evs), err)
			}
		} else if len(events) != 1 || events[0].subject != msg.subject || !bytes.Equal(events[0].data, data) {
			t.Fatalf("a lone event expands to %d events", len(events))
		}
		for i := range events {
			e := &events[i]
			d := decode(log, e)
			checkDecoded(t, e, &d, key, largest)
		}
	})
}

func checkDecoded(t *testing.T, e *event, d *decoded, key ed25519.PrivateKey, largest schemas.DecisionEvent) {
	t.Helper()
	set := 0
	for _, p := range []bool{d.decision != nil, d.outcome != nil, d.timeout != nil} {
		if p {
			set++
		}
	}
	if d.eventID == "" {
		if set != 0 || d.receiptID != "" || d.openRecord != nil || d.raw != nil {
			t.Fatalf("a skipped event left state behind: %+v", d)
		}
		return
	}
	if set != 1 {
		t.Fatalf("%d event kinds decoded from one %s event", set, e.subject)
	}
	var v interface{ Validate() error }
	var wantEventID string
	switch {
	case d.decision != nil && e.subject == schemas.SubjectDecision:
		v, wantEventID = d.decision, schemas.DecisionEventID(d.decision.ReceiptID)
	case d.outcome != nil && e.subject == schemas.SubjectOutcome:
		v, wantEventID = d.outcome, schemas.OutcomeEventID(d.outcome.ReceiptID)
	case d.timeout != nil && e.subject == schemas.SubjectTimeout:
		v, wantEventID = d.timeout, schemas.TimeoutEventID(d.timeout.ReceiptID)
	default:
		t.Fatalf("a %s event decoded as another kind: %+v", e.subject, d)
	}
	if err := v.Validate(); err != nil {
		t.Fatalf("decoded an invalid event: %v", err)
	}
	if d.eventID != wantEventID || !schemas.ValidID(d.receiptID) || !strings.HasPrefix(d.eventID, d.receiptID+".") {
		t.Fatalf("ids %q, %q", d.eventID, d.receiptID)
	}

	switch {
	case d.decision != nil:
		allow := d.decision.Decision.Verdict == schemas.VerdictAllow
		if allow != (d.openRecord != nil) || allow && !bytes.Equal(d.raw, e.data) {
			t.Fatalf("allow %v with open record %v", allow, d.openRecord != nil)
		}
		if !allow {
			return
		}
		rec := append(append([]byte(openRecordPrefix), d.raw...), openRecordSuffix...)
		var p pending
		if err := json.Unmarshal(rec, &p); err != nil || p.Decision == nil || p.Outcome != nil {
			t.Fatalf("the open-call record does not decode: %v\n%s", err, rec)
		}
		if a, b := mustJSON(p.Decision), mustJSON(d.decision); !bytes.Equal(a, b) {
			t.Fatalf("the open-call record holds another decision:\n%s\n%s", a, b)
		}
	case d.outcome != nil:
		dec := decisionFor(largest, d.receiptID)
		b := bodyFromOutcome(dec, schemas.EvidenceAsserted, d.outcome)
		r := signedFits(t, key, b)
		var m map[string]json.RawMessage
		if err := json.Unmarshal(r.Metadata, &m); err != nil {
			t.Fatalf("receipt metadata: %v", err)
		}
		if want := mustJSON(strings.Repeat("m", schemas.MaxMetadataBytes-8)); !bytes.Equal(m["k"], want) {
			t.Fatal("the outcome's metadata replaced the decision's")
		}
		if _, ok := m[governedKey]; ok {
			t.Fatalf("an outcome without a governed decision made a %s block", governedKey)
		}
	default:
		dec := decisionFor(largest, d.receiptID)
		incomplete := schemas.Decision{Verdict: schemas.VerdictIncomplete, Reason: d.timeout.Reason}
		signedFits(t, key, bodyFromDecision(dec, schemas.EvidenceAsserted, incomplete, d.timeout.Timestamp, schemas.EmptyContentHash))
	}
}

// signedFits signs b as the ledger does and checks the leaf fits a bundle
// entry and reads back as a receipt that verifies.
func signedFits(t *testing.T, key ed25519.PrivateKey, b *schemas.ReceiptBody) *schemas.Receipt {
	t.Helper()
	leaf, err := schemas.SignReceiptLeaf(key, *b)
	if err != nil {
		t.Fatalf("a receipt folded from valid events does not sign: %v", err)
	}
	if len(leaf) > schemas.MaxEncodedReceipt {
		t.Fatalf("a receipt folded from valid events is %d bytes, over %d", len(leaf), schemas.MaxEncodedReceipt)
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		t.Fatalf("the leaf does not parse: %v", err)
	}
	if err := r.Verify(); err != nil {
		t.Fatalf("the leaf does not verify: %v", err)
	}
	return r
}
