package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// Two `chio ledger --standby` instances on one NATS: one writes, the other
// follows into its own store; stopping the writer hands the lease over and
// the log goes on, identical on both, every call receipted once.
func TestStandbyLedgersFailOver(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
	}{
		{"every event kept", nil},
		// The writer purges what it and its readers have folded, and the
		// standby takes over from its own store with every receipt once
		// (TestEventRetention checks that a standby's report holds a purge).
		{"event retention", []string{"--event-retention", "1s"}},
	} {
		t.Run(tc.name, func(t *testing.T) { standbyLedgersFailOver(t, tc.extra) })
	}
}

func standbyLedgersFailOver(t *testing.T, extra []string) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	keys := filepath.Join(t.TempDir(), "keys")
	if _, err := chio(context.Background(), "keygen", "--out", keys); err != nil {
		t.Fatal(err)
	}
	listening := regexp.MustCompile(`log API on (http://\S+) `)
	const token = "ha-service-token" // reads the receipts of either ledger
	start := func(name string) (string, func() error) {
		out, stop := startCommand(t, listening, append([]string{"ledger", "--nats", ns.ClientURL(), "--data-dir", t.TempDir(), "--keys", keys,
			"--listen", "127.0.0.1:0", "--standby", "--instance", name, "--lease-ttl", "3s", "--batch-wait", "1ms", "--service-token", token}, extra...)...)
		return listening.FindStringSubmatch(out)[1], stop
	}
	urlA, stopA := start("ledger-a")
	urlB, stopB := start("ledger-b")
	isWriter := func(url string) bool {
		code, body := httpGet(t, url+"/metrics")
		return code == http.StatusOK && strings.Contains(string(body), "\nchio_ledger_writer 1")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("a writer", func() bool { return isWriter(urlA) || isWriter(urlB) })
	writer, standbyURL, stopWriter := urlA, urlB, stopA
	if isWriter(urlB) {
		writer, standbyURL, stopWriter = urlB, urlA, stopB
	}
	if isWriter(standbyURL) {
		t.Fatal("two writers")
	}
	var ids []string
	for range 20 {
		ids = append(ids, publishCall(t, js, nil, schemas.VerdictDeny))
	}
	waitFor("the writer to log 20", func() bool { return logSize(t, writer) == 20 })
	waitFor("the standby to follow to 20", func() bool { return logSize(t, standbyURL) == 20 })
	events, err := js.Stream(context.Background(), schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	if extra != nil {
		// The projections' consumer, which the writer waits for, has read
		// everything.
		if _, err := js.CreateConsumer(context.Background(), schemas.EventsStream, jetstream.ConsumerConfig{
			Durable: projections.Durable(projections.DefaultName, schemas.EventsStream), DeliverPolicy: jetstream.DeliverNewPolicy,
			AckPolicy: jetstream.AckAllPolicy, Metadata: schemas.ReaderMetadata(),
		}); err != nil {
			t.Fatal(err)
		}
		waitFor("the writer to purge the folded events", func() bool {
			info, err := events.Info(context.Background())
			return err == nil && info.State.FirstSeq == 21
		})
	}

	// A clean stop releases the lease: the standby takes over at once.
	if err := stopWriter(); err != nil {
		t.Fatal(err)
	}
	waitFor("the standby to become the writer", func() bool { return isWriter(standbyURL) })
	for range 10 {
		ids = append(ids, publishCall(t, js, nil, schemas.VerdictDeny))
	}
	waitFor("the new writer to log 30", func() bool { return logSize(t, standbyURL) == 30 })
	for _, id := range ids {
		code, body := httpGetAs(t, token, standbyURL+"/v1/receipts/"+id)
		var r struct {
			LeafIndex uint64 `json:"leaf_index"`
		}
		if code != http.StatusOK || json.Unmarshal(body, &r) != nil {
			t.Fatalf("receipt %s: %d %s", id, code, body)
		}
	}
	// Receipts on CHIO_RECEIPTS: each leaf once, across both writers.
	stream, err := js.Stream(context.Background(), schemas.ReceiptsStream)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("30 published receipts", func() bool {
		info, err := stream.Info(context.Background())
		return err == nil && info.State.Msgs >= 30
	})
	time.Sleep(200 * time.Millisecond)
	if info, _ := stream.Info(context.Background()); info.State.Msgs != 30 {
		t.Fatalf("%d receipts published for 30 calls", info.State.Msgs)
	}
}
