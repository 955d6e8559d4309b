package natstest

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// Decisions reads every decision event on CHIO_EVENTS (batched envelopes
// unpacked), by receipt id.
func Decisions(t testing.TB, js jetstream.JetStream) map[string]schemas.DecisionEvent {
	t.Helper()
	out := map[string]schemas.DecisionEvent{}
	for _, raw := range events(t, js, schemas.SubjectDecision) {
		var d schemas.DecisionEvent
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatal(err)
		}
		out[d.ReceiptID] = d
	}
	return out
}

// Outcomes reads every outcome event on CHIO_EVENTS, by receipt id.
func Outcomes(t testing.TB, js jetstream.JetStream) map[string]schemas.OutcomeEvent {
	t.Helper()
	out := map[string]schemas.OutcomeEvent{}
	for _, raw := range events(t, js, schemas.SubjectOutcome) {
		var o schemas.OutcomeEvent
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		out[o.ReceiptID] = o
	}
	return out
}

// events are the data of the events of subject on CHIO_EVENTS, in order.
func events(t testing.TB, js jetstream.JetStream, subject string) []json.RawMessage {
	t.Helper()
	c, err := js.OrderedConsumer(context.Background(), schemas.EventsStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subject, schemas.SubjectEnvelope}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := c.FetchNoWait(10000)
	if err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	for m := range batch.Messages() {
		evs, err := schemas.UnpackEvents(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Subject == subject {
				out = append(out, e.Data)
			}
		}
	}
	return out
}

// EnvelopeReader creates a durable consumer of CHIO_EVENTS that declares
// it reads event envelopes, as the ledger's and the projections' do, so
// that an edge's writer may write them (without one, every event is
// written alone). The stream must exist.
func EnvelopeReader(t testing.TB, js jetstream.JetStream) {
	t.Helper()
	if _, err := js.CreateOrUpdateConsumer(context.Background(), schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: "test-envelope-reader", AckPolicy: jetstream.AckNonePolicy, Metadata: schemas.ReaderMetadata(),
	}); err != nil {
		t.Fatal(err)
	}
}
