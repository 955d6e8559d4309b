package schemas

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// eventKinds are the three event decoders, each with a fresh value to
// decode into and its event id rule.
var eventKinds = []struct {
	name    string
	new     func() interface{ Validate() error }
	ids     func(v any) (eventID, receiptID string)
	eventID func(receiptID string) string
}{
	{"decision", func() interface{ Validate() error } { return new(DecisionEvent) },
		func(v any) (string, string) { e := v.(*DecisionEvent); return e.EventID, e.ReceiptID }, DecisionEventID},
	{"outcome", func() interface{ Validate() error } { return new(OutcomeEvent) },
		func(v any) (string, string) { e := v.(*OutcomeEvent); return e.EventID, e.ReceiptID }, OutcomeEventID},
	{"timeout", func() interface{ Validate() error } { return new(TimeoutEvent) },
		func(v any) (string, string) { e := v.(*TimeoutEvent); return e.EventID, e.ReceiptID }, TimeoutEventID},
}

// FuzzEventDecoders decodes bytes as a decision, outcome or timeout event,
// strictly (DecodeStrict) and as encoding/json does (what the ledger and
// projections read the stream with), and validates the result. Properties:
//   - whatever the strict decoder accepts, encoding/json accepts and
//     decodes to the same value: strictness only refuses, never reads
//     differently;
//   - validation never panics, whichever decoder filled the value;
//   - a valid event's ids agree (event id = receipt id + kind suffix, the
//     receipt id a ValidID), and it encodes to JSON that decodes strictly,
//     validates again, and encodes to the same bytes: what an edge
//     publishes is what the ledger folds.
func FuzzEventDecoders(f *testing.F) {
	dec := DecisionEvent{Schema: DecisionEventSchema, EventID: DecisionEventID("r1"), ReceiptID: "r1", Timestamp: 1,
		CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{"path":"docs/a.txt","n":[1,2.5e3,null]}`),
		Decision: Decision{Verdict: VerdictDeny, Reason: "no grant", Guard: "grant"}, PolicyHash: "p",
		Evidence: []GuardEvidence{{GuardName: "g", Verdict: false, Details: "d"}}, Metadata: json.RawMessage(`{"a":1}`),
		TrustLevel: TrustVerified, TenantID: "tenant-1", RequestID: "req", TaskID: "task", EdgeID: "edge-a2a",
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	allow := dec
	allow.Decision, allow.Evidence, allow.Metadata = Decision{Verdict: VerdictAllow}, nil, nil
	out := OutcomeEvent{Schema: OutcomeEventSchema, EventID: OutcomeEventID("r1"), ReceiptID: "r1", Timestamp: 2,
		Outcome: OutcomeFailed, ContentHash: EmptyContentHash, Reason: "tool error", Metadata: json.RawMessage(`{"bytes":5}`)}
	refused := OutcomeEvent{Schema: OutcomeEventSchema, EventID: OutcomeEventID("r-2"), ReceiptID: "r-2", Timestamp: 2,
		Outcome: OutcomeRefused, ContentHash: EmptyContentHash, Reason: "dpop replayed", Guard: "dpop"}
	to := TimeoutEvent{Schema: TimeoutEventSchema, EventID: TimeoutEventID("r1"), ReceiptID: "r1", Timestamp: 3, Reason: "late"}
	for kind, v := range []any{&dec, &out, &to} {
		raw, err := json.Marshal(v)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(kind), raw)
	}
	f.Add(uint8(0), mustMarshal(f, &allow))
	f.Add(uint8(1), mustMarshal(f, &refused))
	f.Add(uint8(0), []byte(`{"schema":"chio.event.decision.v1","event_id":"a.decision","receipt_id":"a","timestamp":1,"capability_id":"c","tool_server":"s","tool_name":"t","parameters":{"\u2028":"\ud83d\ude00"},"decision":{"verdict":"allow"},"policy_hash":"p","metadata":{"k":1e20},"governed_intent":{"purpose":"x"}}`))
	f.Add(uint8(1), []byte(`{"schema":"chio.event.outcome.v1","event_id":"r1.outcome","receipt_id":"r1","timestamp":2,"outcome":"completed","content_hash":"`+EmptyContentHash+`","extra":1}`))
	f.Add(uint8(2), []byte(`{"schema":"chio.event.timeout.v1","event_id":"r1.timeout","receipt_id":"r1","timestamp":3,"reason":"late"} {}`))

	f.Fuzz(func(t *testing.T, kind uint8, raw []byte) {
		k := eventKinds[int(kind)%len(eventKinds)]
		strict, loose := k.new(), k.new()
		strictErr := DecodeStrict(raw, strict)
		looseErr := json.Unmarshal(raw, loose)
		if looseErr == nil {
			_ = loose.Validate() // must not panic; the ledger validates what encoding/json decoded
		}
		if strictErr != nil {
			return
		}
		if looseErr != nil {
			t.Fatalf("%s: DecodeStrict accepts what encoding/json refuses (%v): %q", k.name, looseErr, raw)
		}
		if !reflect.DeepEqual(strict, loose) {
			t.Fatalf("%s: DecodeStrict and encoding/json disagree on %q:\n%#v\n%#v", k.name, raw, strict, loose)
		}
		if strict.Validate() != nil {
			return
		}
		eventID, receiptID := k.ids(strict)
		if !ValidID(receiptID) || eventID != k.eventID(receiptID) {
			t.Fatalf("%s: valid event with ids %q, %q", k.name, eventID, receiptID)
		}
		enc, err := json.Marshal(strict)
		if err != nil {
			t.Fatalf("%s: a valid event does not encode: %v", k.name, err)
		}
		again := k.new()
		if err := DecodeStrict(enc, again); err != nil {
			t.Fatalf("%s: the encoding of a valid event does not decode strictly: %v\n%s", k.name, err, enc)
		}
		if err := again.Validate(); err != nil {
			t.Fatalf("%s: a valid event no longer validates after a round trip: %v\n%s", k.name, err, enc)
		}
		enc2, err := json.Marshal(again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("%s: encoding is not stable: %v\n%s\n%s", k.name, err, enc, enc2)
		}
	})
}

func mustMarshal(f *testing.F, v any) []byte {
	f.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		f.Fatal(err)
	}
	return raw
}
