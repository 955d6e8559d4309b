package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// envelopeGauge reads chio_edge_event_envelopes_enabled off /metrics.
func envelopeGauge(t *testing.T, base string) string {
	t.Helper()
	_, body := httpGet(t, base+"/metrics")
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, "chio_edge_event_envelopes_enabled "); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// sendCalls makes n concurrent A2A calls and returns their receipt ids.
func sendCalls(t *testing.T, client *a2aclient.Client, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			res, err := client.SendMessage(context.Background(), &a2apb.SendMessageRequest{
				Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(fmt.Sprintf("%s%d", prefix, i)))})
			if err != nil {
				errs <- err
				return
			}
			task, ok := res.(*a2apb.Task)
			if !ok {
				errs <- fmt.Errorf("answer %T", res)
				return
			}
			meta, _ := task.Metadata["chio"].(map[string]any)
			ids[i], _ = meta["receiptId"].(string)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return ids
}

// Mixed versions without an upgrade order: beside chio up (edges, ledger
// and projections of this release) runs a durable consumer of an older
// release, one that reads one event per message and skips anything else.
// The edge stops writing envelopes within its refresh interval, and under
// concurrent calls the older consumer folds every call's decision and
// outcome with nothing skipped, while the ledger signs every receipt.
// Once that consumer is upgraded the edge writes envelopes again.
func TestOlderConsumerBesideNewEdges(t *testing.T) {
	up := startUp(t)
	ctx := context.Background()
	// The older consumer is a ledger's: it connects with the ledger's credential.
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Ledger)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const oldName = "ledger-of-an-older-release"
	cons, err := js.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: oldName, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		t.Fatal(err)
	}
	card, err := agentcard.DefaultResolver.Resolve(ctx, up.httpURL)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromCard(ctx, card)
	if err != nil {
		t.Fatal(err)
	}
	waitGauge := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for envelopeGauge(t, up.httpURL) != want {
			if time.Now().After(deadline) {
				t.Fatalf("chio_edge_event_envelopes_enabled is %q, want %s", envelopeGauge(t, up.httpURL), want)
			}
			sendCalls(t, client, "probe", 1) // a write makes the edge look again
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitGauge("0")
	// Whatever the older consumer got before the gate shut is not this
	// test's: it starts from the stream's end now.
	if err := js.DeleteConsumer(ctx, schemas.EventsStream, oldName); err != nil {
		t.Fatal(err)
	}
	if cons, err = js.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: oldName, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy}); err != nil {
		t.Fatal(err)
	}

	const calls = 200
	ids := sendCalls(t, client, "old", calls)
	folded := map[string]map[string]bool{} // receipt id → subjects folded
	skipped := 0
	deadline := time.Now().Add(30 * time.Second)
	for complete := 0; complete < calls; {
		if time.Now().After(deadline) {
			t.Fatalf("the older consumer folded %d of %d calls whole (%d skipped)", complete, calls, skipped)
		}
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			_ = m.Ack()
			if m.Subject() != schemas.SubjectDecision && m.Subject() != schemas.SubjectOutcome {
				skipped++
				continue
			}
			var e struct {
				ReceiptID string `json:"receipt_id"`
			}
			if err := json.Unmarshal(m.Data(), &e); err != nil {
				t.Fatal(err)
			}
			if folded[e.ReceiptID] == nil {
				folded[e.ReceiptID] = map[string]bool{}
			}
			folded[e.ReceiptID][m.Subject()] = true
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			t.Fatal(err)
		}
		complete = 0
		for _, id := range ids {
			if f := folded[id]; f[schemas.SubjectDecision] && f[schemas.SubjectOutcome] {
				complete++
			}
		}
	}
	if skipped != 0 {
		t.Fatalf("the older consumer skipped %d messages it cannot read", skipped)
	}
	for _, id := range ids {
		deadline := time.Now().Add(30 * time.Second)
		for code, _ := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id); code != http.StatusOK; code, _ = httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id) {
			if time.Now().After(deadline) {
				t.Fatalf("receipt %s not in the log (%d)", id, code)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// Upgraded: the consumer declares the layout, and concurrent calls
	// share writes again.
	if _, err := js.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{
		Durable: oldName, AckPolicy: jetstream.AckExplicitPolicy, DeliverPolicy: jetstream.DeliverNewPolicy,
		Metadata: schemas.ReaderMetadata()}); err != nil {
		t.Fatal(err)
	}
	waitGauge("1")
	info, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	before := info.CachedInfo().State.LastSeq
	sendCalls(t, client, "new", calls)
	stream, _ := js.Stream(ctx, schemas.EventsStream)
	after := stream.CachedInfo().State.LastSeq
	if after-before >= 2*calls {
		t.Fatalf("%d messages for %d concurrent calls' events: no write was shared once every consumer reads envelopes", after-before, calls)
	}
	t.Logf("beside the older consumer: %d calls, every event its own message, none skipped; upgraded: %d calls in %d messages", calls, calls, after-before)
}
