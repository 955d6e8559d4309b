package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// The events stream deleted under chio up while calls come in (its
// operator credential can): the ledger makes no receipt of the new
// stream, says why on /readyz, and the edge refuses calls with "event
// store reset", until chio up is started again accepting exactly that
// stream. Then every call that was answered with a receipt id has its
// receipt: none is skipped.
func TestUpStreamResetRefusesCalls(t *testing.T) {
	dir := t.TempDir()
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	start := func(extra ...string) (string, string, func() error) {
		out, stop := startCommand(t, regexp.MustCompile(`try: curl`),
			append([]string{"up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--grpc-listen", "none"}, extra...)...)
		return httpRE.FindStringSubmatch(out)[1], natsRE.FindStringSubmatch(out)[1], stop
	}
	httpURL, natsURL, stop := start()
	token := upOperatorToken(t, dir)

	var (
		mu      sync.Mutex
		answers []upAnswer
		begun   []time.Time // when each call was sent
	)
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			client := &http.Client{Timeout: 30 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				sent := time.Now()
				a := sendHello(client, httpURL, w*100000+i)
				mu.Lock()
				answers, begun = append(answers, a), append(begun, sent)
				mu.Unlock()
			}
		})
	}
	answered := func() (n, reset int) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			switch {
			case a.err == nil:
				n++
			case strings.Contains(a.err.Error(), "event store reset"):
				reset++
			}
		}
		return n, reset
	}
	waitUntil := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				mu.Lock()
				seen := map[string]int{}
				for _, a := range answers {
					if a.err != nil {
						seen[a.err.Error()[:min(len(a.err.Error()), 300)]]++
					}
				}
				mu.Unlock()
				t.Fatalf("timed out waiting for %s; errors: %v", what, seen)
			}
		}
	}
	waitUntil("calls answered", func() bool { n, _ := answered(); return n >= 20 })

	ctx := context.Background()
	js, err := jetstream.New(dialUp(t, natsURL, dir, natsauth.Operator))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, schemas.EventsStream); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	waitUntil("calls refused with event store reset", func() bool { _, r := answered(); return r >= 5 })
	close(stopLoad)
	wg.Wait()
	// The ledger's own look at the stream comes within its recheck.
	var body []byte
	waitUntil("/readyz to name the reset", func() bool {
		var status int
		status, body = httpGet(t, httpURL+"/readyz")
		return status == http.StatusServiceUnavailable && strings.Contains(string(body), `"events_stream":"event store reset`)
	})
	stream, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	accept := schemas.StreamIdentity(stream.CachedInfo())
	if !strings.Contains(string(body), accept) {
		t.Fatalf("/readyz does not name the stream to accept (%s): %s", accept, body)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	httpURL, _, _ = start("--accept-events-stream", accept)
	// A call sent after the stream was gone was refused, or has its
	// receipt. Those answered before went with the old stream if the
	// ledger had not folded them yet: counted, as the cost of the loss.
	n, reset := answered()
	after, lost := 0, 0
	for i, a := range answers {
		if a.err != nil {
			continue
		}
		deadline := time.Now().Add(30 * time.Second)
		if begun[i].Before(deleted) {
			deadline = time.Now() // folded already, or lost with the stream
		} else {
			after++
		}
		for {
			status, _ := httpGetAs(t, token, httpURL+"/v1/receipts/"+a.receipt)
			if status == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				if begun[i].Before(deleted) {
					lost++
					break
				}
				t.Fatalf("call sent after the reset, answered with receipt %s, has none (status %d): %d answered, %d refused for the reset", a.receipt, status, n, reset)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.Logf("%d calls answered (%d sent after the stream was deleted), %d refused for the reset, of %d; %d answered before the deletion were lost with the stream", n, after, reset, len(answers), lost)
}

// chio up's log directory deleted while it is stopped: on the next start
// it rebuilds from the stream, and meanwhile serves no checkpoint smaller
// than the one it published (503, and /readyz names it); then the same
// size and root as before, or larger.
func TestUpRebuildServesNoSmallerCheckpoint(t *testing.T) {
	dir := t.TempDir()
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	start := func() (string, string, func() error) {
		out, stop := startCommand(t, regexp.MustCompile(`log API on`),
			"up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--grpc-listen", "none")
		return httpRE.FindStringSubmatch(out)[1], natsRE.FindStringSubmatch(out)[1], stop
	}
	httpURL, natsURL, stop := start()
	js, err := jetstream.New(dialUp(t, natsURL, dir, natsauth.Edge))
	if err != nil {
		t.Fatal(err)
	}
	signer := upSigner(t, filepath.Join(dir, "keys"))
	const calls = 300
	for range calls {
		publishCall(t, js, signer, schemas.VerdictDeny)
	}
	var before []byte
	for deadline := time.Now().Add(30 * time.Second); logSize(t, httpURL) < calls; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("log size %d, want %d", logSize(t, httpURL), calls)
		}
	}
	// The head is recorded just after the commit.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		raw, err := os.ReadFile(filepath.Join(dir, publishedHeadFile))
		if err == nil && strings.Contains(string(raw), fmt.Sprintf(`"size":%d`, calls)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("published head: %s %v", raw, err)
		}
	}
	_, before = httpGet(t, httpURL+"/log/checkpoint")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "log")); err != nil {
		t.Fatal(err)
	}

	httpURL, _, _ = start()
	unready := false
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		status, body := httpGet(t, httpURL+"/log/checkpoint")
		if status == http.StatusServiceUnavailable {
			if !strings.Contains(string(body), "log_not_serving") {
				t.Fatalf("503 while rebuilding: %s", body)
			}
			unready = true
		} else if status == http.StatusOK {
			if n := logSize(t, httpURL); n < calls {
				t.Fatalf("served a checkpoint of size %d while rebuilding, after one of size %d", n, calls)
			}
			if logSize(t, httpURL) == calls && !bytes.Equal(body, before) {
				t.Fatalf("rebuilt checkpoint differs:\n%s\nbefore:\n%s", body, before)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/log/checkpoint: %d %s", status, body)
		}
	}
	t.Logf("rebuilt to %d; refused while rebuilding: %v", calls, unready)
}
