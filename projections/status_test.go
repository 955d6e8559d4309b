package projections

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

func TestStatus(t *testing.T) {
	h := newHarness(t)
	for i := range 5 {
		h.decision(fmt.Sprintf("rcpt-status-%d", i), chain("cap-status")...)
	}
	h.commit("t1", created("ctx-1", 0))
	live := h.start("live")
	h.caughtUp(live)
	srv := server(t, live.Service)

	read := func(t *testing.T) Status {
		t.Helper()
		live.statusC.mu.Lock()
		live.statusC.st = nil // each read here is a new reading
		live.statusC.mu.Unlock()
		code, _, raw := get(t, srv.URL, "/v1/status", opToken)
		if code != http.StatusOK {
			t.Fatalf("%d %s", code, raw)
		}
		var st Status
		if err := json.Unmarshal(raw, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	wantProjections := []Lag{
		{Stream: schemas.TasksStream, Consumer: DefaultName + "-tasks", Position: 1, LastSeq: 1},
		{Stream: schemas.EventsStream, Consumer: DefaultName + "-events", Position: 5, LastSeq: 5},
		{Stream: schemas.ReceiptsStream, Consumer: DefaultName + "-receipts"},
	}

	t.Run("no ledger consumer", func(t *testing.T) {
		if st := read(t); st.Ledger != nil || !reflect.DeepEqual(st.Projections, wantProjections) {
			t.Errorf("%+v", st)
		}
	})

	// A ledger consumer as the ledger makes it (ack all), that has taken
	// three events and acknowledged two.
	cons, err := h.js.CreateConsumer(h.ctx, schemas.EventsStream, jetstream.ConsumerConfig{Durable: schemas.LedgerConsumer,
		AckPolicy: jetstream.AckAllPolicy, AckWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.Fetch(3, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []jetstream.Msg
	for m := range batch.Messages() {
		msgs = append(msgs, m)
	}
	if len(msgs) != 3 {
		t.Fatalf("fetched %d events", len(msgs))
	}
	if err := msgs[1].DoubleAck(h.ctx); err != nil { // ack all: the first two
		t.Fatal(err)
	}
	t.Run("ledger behind", func(t *testing.T) {
		want := &LedgerStatus{Consumer: schemas.LedgerConsumer, Behind: 3, IntegratedSeq: 2}
		if st := read(t); !reflect.DeepEqual(st.Ledger, want) || !reflect.DeepEqual(st.Projections, wantProjections) {
			t.Errorf("ledger %+v, want %+v; projections %+v", st.Ledger, want, st.Projections)
		}
	})

	t.Run("bad parameter", func(t *testing.T) {
		code, body, raw := get(t, srv.URL, "/v1/status?x=1", opToken)
		if code != http.StatusBadRequest || body["code"] != CodeInvalidParameter || body["param"] != "x" {
			t.Errorf("%d %s", code, raw)
		}
	})

	t.Run("not consuming", func(t *testing.T) {
		idle, err := Open(filepath.Join(h.dir, "idle"), WithLogger(h.log), WithKernelKey(kernelPriv.Public().(ed25519.PublicKey)), WithServiceToken(opToken))
		if err != nil {
			t.Fatal(err)
		}
		defer idle.Close()
		ctx, cancel := context.WithTimeout(h.ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := idle.status(ctx); err == nil {
			t.Error("status of a service that does not run")
		}
	})
}

// TestStatusIsForEveryReader: the status names no tenant's data; readers
// of less than every receipt get no stream positions.
func TestStatusIsForEveryReader(t *testing.T) {
	f := newScopeFixture(t)
	for _, c := range []struct {
		reader string
		code   int
	}{
		{"operator", http.StatusOK}, {"auditor", http.StatusOK}, {"A", http.StatusOK}, {"B", http.StatusOK},
		{"tenant-A", http.StatusOK}, {"anonymous", http.StatusUnauthorized},
	} {
		t.Run(c.reader, func(t *testing.T) {
			code, body, raw := f.get(t, "/v1/status", f.readers[c.reader])
			if code != c.code {
				t.Fatalf("%d %s, want %d", code, raw, c.code)
			}
			if code == http.StatusOK && len(body["projections"].([]any)) != 3 {
				t.Errorf("%s", raw)
			}
			full := c.reader == "operator" || c.reader == "auditor"
			if code == http.StatusOK && bytes.Contains(raw, []byte(`"lastSeq"`)) != full {
				t.Errorf("%s: stream positions shown %v, want %v: %s", c.reader, !full, full, raw)
			}
			f.noLeak(t, c.reader, "/v1/status", raw)
		})
	}
}
