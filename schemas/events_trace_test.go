package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestDecisionEventTraceID(t *testing.T) {
	for _, tc := range []struct {
		name    string
		traceID string
		ok      bool
	}{
		{"absent", "", true},
		{"32 lowercase hex", "4bf92f3577b34da6a3ce929d0e0e4736", true},
		{"uppercase", "4BF92F3577B34DA6A3CE929D0E0E4736", false},
		{"short", "4bf92f3577b34da6", false},
		{"long", "4bf92f3577b34da6a3ce929d0e0e47360", false},
		{"not hex", "4bf92f3577b34da6a3ce929d0e0e473g", false},
		{"all zero, the invalid id", strings.Repeat("0", 32), false},
		{"a whole traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := DecisionEvent{Schema: DecisionEventSchema, EventID: DecisionEventID("r1"), ReceiptID: "r1", Timestamp: 1,
				CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{}`),
				Decision: Decision{Verdict: VerdictAllow}, PolicyHash: "p", TraceID: tc.traceID}
			if err := e.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate: %v, want ok %v", err, tc.ok)
			}
			raw, _ := json.Marshal(e)
			if has := strings.Contains(string(raw), `"trace_id"`); has != (tc.traceID != "") {
				t.Fatalf("encoded %s", raw)
			}
		})
	}
}
