package schemas

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestDecisionOutcomeDeadline: outcome_deadline is optional and absent
// from an event without it (old events are byte for byte what they were),
// and when set it must follow the decision's timestamp by at most
// MaxOutcomeDeadline, on an allow decision only.
func TestDecisionOutcomeDeadline(t *testing.T) {
	const ts = 1_760_000_000
	base := DecisionEvent{Schema: DecisionEventSchema, EventID: DecisionEventID("r1"), ReceiptID: "r1", Timestamp: ts,
		CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{}`),
		Decision: Decision{Verdict: VerdictAllow}, PolicyHash: "p"}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "outcome_deadline") {
		t.Fatalf("an event without a deadline encodes one: %s", raw)
	}
	for _, tc := range []struct {
		name     string
		deadline uint64
		deny     bool
		want     string // "" valid
	}{
		{"one second", ts + 1, false, ""},
		{"the maximum", ts + MaxOutcomeDeadline, false, ""},
		{"at the timestamp", ts, false, "must be after timestamp"},
		{"before the timestamp", ts - 1, false, "must be after timestamp"},
		{"past the maximum", ts + MaxOutcomeDeadline + 1, false, "at most 86400 s"},
		{"on a deny", ts + 60, true, "for an allow decision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := base
			e.OutcomeDeadline = tc.deadline
			if tc.deny {
				e.Decision = Decision{Verdict: VerdictDeny, Reason: "no", Guard: "g"}
			}
			err := e.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if tc.want != "" {
				return
			}
			raw, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			var back DecisionEvent
			if err := DecodeStrict(raw, &back); err != nil || back.OutcomeDeadline != tc.deadline {
				t.Fatalf("round trip: %v, deadline %d", err, back.OutcomeDeadline)
			}
		})
	}
}
