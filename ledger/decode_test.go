package ledger

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/chio-ledger/chio/schemas"
)

// Events are decoded from the stream message's own bytes, without copying
// them first. That is only sound if nothing the ledger keeps past the
// batch (the store, the pending cache, the receipts handed to the
// publisher) still points into a message: this folds events, lone and in
// envelopes, then scribbles over every message buffer and checks all of it
// is unchanged.
func TestDecodedEventsOutliveTheirMessages(t *testing.T) {
	h := newHarness(t)
	const ts = 1_700_000_000
	open, deny := newCall(schemas.VerdictAllow, ""), newCall(schemas.VerdictDeny, "")
	done, enveloped := newCall(schemas.VerdictAllow, schemas.OutcomeCompleted), newCall(schemas.VerdictAllow, "")
	raw := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	env, err := schemas.PackEvents([]schemas.StreamEvent{
		{Subject: schemas.SubjectDecision, Data: raw(decisionEvent(enveloped, ts))},
		{Subject: schemas.SubjectOutcome, Data: raw(outcomeEvent(done, ts+1))},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		msgs []event
		// open calls (pending record kept) and receipts produced
		pending, receipts []string
	}{
		{"lone events", []event{
			{seq: 1, subject: schemas.SubjectDecision, data: raw(decisionEvent(open, ts))},
			{seq: 2, subject: schemas.SubjectDecision, data: raw(decisionEvent(deny, ts))},
			{seq: 3, subject: schemas.SubjectDecision, data: raw(decisionEvent(done, ts))},
			{seq: 4, subject: schemas.SubjectOutcome, data: raw(outcomeEvent(done, ts+1))},
		}, []string{open.id}, []string{deny.id, done.id}},
		{"an envelope", []event{
			{seq: 1, subject: schemas.SubjectDecision, data: raw(decisionEvent(done, ts))},
			{seq: 2, subject: schemas.SubjectEnvelope, data: bytes.Clone(env)},
		}, []string{enveloped.id}, []string{done.id}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, l := offlineLedger(t, filepath.Join(t.TempDir(), "log"), h.keys)
			defer store.Close()
			_, _, pub, err := l.apply(tc.msgs, nil)
			if err != nil {
				t.Fatal(err)
			}
			snapshot := func() (recs map[string][]byte, cached map[string][]byte, leaves [][]byte, published [][]byte) {
				recs, cached = map[string][]byte{}, map[string][]byte{}
				for _, id := range tc.pending {
					rec, err := store.Pending(id)
					if err != nil {
						t.Fatalf("pending record of %s: %v", id, err)
					}
					recs[id] = rec
					p, ok := l.pending.get(id)
					if !ok || p.Decision == nil {
						t.Fatalf("pending cache lacks %s", id)
					}
					cached[id] = raw(p)
				}
				for _, id := range tc.receipts {
					_, _, leaf := h.receipt(store, id)
					leaves = append(leaves, leaf)
				}
				for _, p := range pub {
					published = append(published, bytes.Clone(p.leaf))
				}
				return
			}
			recs, cached, leaves, published := snapshot()
			for id, rec := range recs {
				var p pending
				if err := json.Unmarshal(rec, &p); err != nil || p.Decision == nil || p.Decision.ReceiptID != id {
					t.Fatalf("pending record of %s does not decode to its decision: %v (%s)", id, err, rec)
				}
			}
			if len(published) != len(tc.receipts) {
				t.Fatalf("%d receipts handed to the publisher, want %d", len(published), len(tc.receipts))
			}
			for _, m := range tc.msgs { // the buffers reused for something else
				for i := range m.data {
					m.data[i] = 'X'
				}
			}
			recs2, cached2, leaves2, _ := snapshot()
			for id := range recs {
				if !bytes.Equal(recs[id], recs2[id]) || !bytes.Equal(cached[id], cached2[id]) {
					t.Fatalf("pending state of %s changed with the message buffer", id)
				}
			}
			for i := range leaves {
				if !bytes.Equal(leaves[i], leaves2[i]) {
					t.Fatalf("receipt %s changed with the message buffer", tc.receipts[i])
				}
			}
			for i, p := range pub {
				if !bytes.Equal(p.leaf, published[i]) {
					t.Fatalf("published leaf %d changed with the message buffer", i)
				}
			}
		})
	}
}
