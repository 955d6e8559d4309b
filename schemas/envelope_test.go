package schemas

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	events := []StreamEvent{
		{SubjectDecision, []byte(`{"event_id":"a.decision"}`)},
		{SubjectOutcome, []byte(`{"event_id":"a.outcome","reason":"x y"}`)},
		{SubjectTimeout, []byte(`{"event_id":"b.timeout"}`)},
	}
	body, err := PackEvents(events)
	if err != nil {
		t.Fatal(err)
	}
	if len(body)+len(EnvelopeKinds(events))+1 != EnvelopeSize(events) {
		t.Fatalf("body %d and kinds %d bytes, EnvelopeSize %d", len(body), len(EnvelopeKinds(events)), EnvelopeSize(events))
	}
	got, err := UnpackEvents(SubjectEnvelope, body)
	if err != nil || !reflect.DeepEqual(got, events) {
		t.Fatalf("unpacked %v (%v), want %v", got, err, events)
	}
	if k := EnvelopeKinds(events); k != "chio.events.decision,chio.events.outcome,chio.events.timeout" {
		t.Fatalf("kinds %q", k)
	}
	if EnvelopeMsgID(body) != EnvelopeMsgID(append([]byte(nil), body...)) || EnvelopeMsgID(body) == EnvelopeMsgID(body[1:]) {
		t.Fatal("message id is not a digest of the body")
	}
	// A lone event is its own message; other subjects carry no events.
	if got, err := UnpackEvents(SubjectOutcome, events[1].Data); err != nil || len(got) != 1 || got[0].Subject != SubjectOutcome {
		t.Fatalf("single event: %v %v", got, err)
	}
	if got, err := UnpackEvents("chio.events.other", []byte("x")); got != nil || err != nil {
		t.Fatalf("unknown subject: %v %v", got, err)
	}
}

func TestEnvelopeRefusesBadFraming(t *testing.T) {
	for _, tc := range []struct {
		name string
		body string
	}{
		{"empty", ""},
		{"no final newline", "chio.events.decision {}"},
		{"no subject", "{}\n"},
		{"unknown subject", "chio.events.other {}\n"},
		{"empty event", "chio.events.decision \n"},
		{"blank line", "chio.events.decision {}\n\n"},
		{"too many", strings.Repeat("chio.events.decision {}\n", MaxEnvelopeEvents+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := UnpackEvents(SubjectEnvelope, []byte(tc.body)); !errors.Is(err, ErrBadEnvelope) || got != nil {
				t.Fatalf("got %v, %v", got, err)
			}
		})
	}
	for _, tc := range []struct {
		name   string
		events []StreamEvent
	}{
		{"none", nil},
		{"newline in data", []StreamEvent{{SubjectDecision, []byte("{\n}")}}},
		{"not an event kind", []StreamEvent{{SubjectEnvelope, []byte("{}")}}},
		{"empty data", []StreamEvent{{SubjectDecision, nil}}},
		{"too large", []StreamEvent{{SubjectDecision, []byte(strings.Repeat("x", MaxEnvelopeBytes))}}},
	} {
		t.Run("pack "+tc.name, func(t *testing.T) {
			if _, err := PackEvents(tc.events); !errors.Is(err, ErrBadEnvelope) {
				t.Fatalf("packed: %v", err)
			}
		})
	}
}

func FuzzUnpackEvents(f *testing.F) {
	f.Add([]byte("chio.events.decision {}\nchio.events.outcome {}\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		evs, err := UnpackEvents(SubjectEnvelope, body)
		if err != nil {
			return
		}
		again, err := PackEvents(evs)
		if err != nil || string(again) != string(body) {
			t.Fatalf("unpacked %q does not pack back: %q %v", body, again, err)
		}
	})
}
