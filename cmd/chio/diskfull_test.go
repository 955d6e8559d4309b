package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/internal/tmpfs"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// TestUpDiskFull runs chio up with one of its stores on a filesystem of
// its own (a 256 MiB tmpfs mounted on the store's directory inside the
// data dir), fills that filesystem to the last byte under light load,
// then gives the space back, and checks that the fault is bounded,
// visible and heals by itself:
//
//   - the log store: calls go on (their decisions and outcomes are
//     recorded in JetStream, on another filesystem); the ledger stops
//     integrating, /readyz says why; once space is back it catches up,
//     its root is what `chio ledger rebuild` computes from the stream, and
//     the store reopens with its integrity checks;
//   - the event store (JetStream): calls fail closed at once with "event
//     store unavailable", counted by reason; /readyz says why; no call has
//     an outcome without its durable decision; once space is back calls
//     succeed again without a restart and every one that succeeded has
//     its receipt;
//   - the projection store: calls go on, folding pauses, /readyz says
//     why; once space is back the projections catch up, and their state
//     is what `chio projections rebuild` computes.
//
// It logs the figures: time from full to the first failed call, to
// readiness turning unavailable, and from space back to the first
// successful call (and to readiness and catch-up).
func TestUpDiskFull(t *testing.T) {
	tmpfs.Enabled(t)
	for _, tc := range []struct {
		name   string
		subdir string // the store's directory in the data dir
		check  string // the /readyz check that must say why
		calls  bool   // calls go on while it is full
	}{
		{"log store", "log", "storage", true},
		{"event store", "nats", "event_store", false},
		{"projection store", "projections", "projections", true},
		// Every store on one filesystem, as an operator with one small
		// volume has it: JetStream refuses writes, so calls fail closed.
		{"data dir", "", "event_store", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			mnt := filepath.Join(dir, tc.subdir)
			tmpfs.MountAt(t, mnt, 256)
			up := startUpIn(t, dir)
			c := &diskCaller{t: t, url: up.httpURL + openai.ToolCallsPath}

			for range 3 {
				if err := c.call(); err != nil {
					t.Fatalf("call before the fill: %v", err)
				}
			}
			waitLog(t, up, uint64(c.ok()), 20*time.Second)
			ready := watchReady(t, up.httpURL)

			fillStart := time.Now()
			filler := tmpfs.Fill(t, mnt)
			full := time.Now()
			t.Logf("filled %s to the last byte (%d MiB of filler in %v)", tc.subdir, filler.Size>>20, full.Sub(fillStart).Round(time.Millisecond))

			// Light load (one call at a time, 50 ms apart) from the moment
			// the filesystem is full, then readiness must have said why.
			var firstFail time.Duration
			var failMsg string
			var failTook []time.Duration
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
				started := time.Now()
				err := c.call()
				if err == nil {
					continue
				}
				failTook = append(failTook, time.Since(started).Round(10*time.Microsecond))
				if firstFail == 0 {
					firstFail, failMsg = time.Since(full), err.Error()
				}
			}
			first, flippedAt := ready.waitUnready(t, fillStart, 15*time.Second)
			t.Logf("readiness unavailable %v after the fill started (the fill took %v): %v",
				flippedAt.Sub(fillStart).Round(time.Microsecond), full.Sub(fillStart).Round(time.Microsecond), first.Checks)
			checks := []string{tc.check}
			if tc.subdir == "" {
				checks = append(checks, "storage", "projections") // every store says so
			}
			st, body := httpGet(t, up.httpURL+health.ReadyPath)
			var now health.Response
			if err := json.Unmarshal(body, &now); err != nil || st != http.StatusServiceUnavailable {
				t.Fatalf("/readyz while full: %d %s", st, body)
			}
			for _, name := range checks {
				if msg := now.Checks[name]; !strings.Contains(msg, "no space left on device") || !strings.Contains(msg, "bytes free") {
					t.Fatalf("/readyz while full: %+v, want check %q to say no space left and the bytes free", now, name)
				}
			}
			// Nothing not durable is acked: the stopped consumer's ack floor
			// is short of the events the edges recorded meanwhile.
			if durable := map[string]string{"log": schemas.LedgerConsumer, "projections": projections.DefaultName + "-events"}[tc.subdir]; durable != "" {
				floor, last := ackFloor(t, up.natsURL, up.dir, durable)
				t.Logf("while full: consumer %s acked up to %d of CHIO_EVENTS' %d", durable, floor, last)
				if floor >= last {
					t.Fatalf("consumer %s acked up to %d with the stream at %d while its store was full", durable, floor, last)
				}
			}
			metrics := scrape(t, up.httpURL)
			if tc.calls {
				if firstFail != 0 {
					t.Fatalf("a call failed %v after the fill although the event store has space: %s", firstFail, failMsg)
				}
				t.Logf("%d calls succeeded while %s was full", c.ok(), tc.subdir)
			} else {
				if firstFail == 0 {
					t.Fatal("no call failed with the event store full")
				}
				t.Logf("first failed call %v after the fill; failed calls took %v: %s", firstFail, failTook, failMsg)
				if !strings.Contains(failMsg, "event store unavailable") {
					t.Fatalf("failed call's answer does not say the event store is unavailable: %s", failMsg)
				}
				if !regexp.MustCompile(`chio_edge_event_writes_failed_total\{event="decision",reason="storage"\} [1-9]`).MatchString(metrics) {
					t.Fatalf("no storage failure counted in /metrics:\n%s", grep(metrics, "chio_edge_event_writes_failed_total"))
				}
				rpc := a2aSend(t, up.httpURL+"/a2a",
					`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":{"role":"user","messageId":"m-disk","parts":[{"kind":"text","text":"world"}]}}}`)
				rest := a2aSend(t, up.httpURL+"/a2a/rest/message:send",
					`{"message":{"role":"ROLE_USER","messageId":"m-disk-rest","parts":[{"text":"world"}]}}`)
				t.Logf("A2A JSON-RPC message/send with the event store full: %s", rpc)
				t.Logf("A2A HTTP+JSON message:send with the event store full: %s", rest)
				if !strings.Contains(rpc, "event store unavailable") {
					t.Fatalf("JSON-RPC answer does not say the event store is unavailable: %s", rpc)
				}
				if !strings.HasPrefix(rest, "HTTP 503 ") || !strings.Contains(rest, "Retry-After ") || !strings.Contains(rest, "event store unavailable") {
					t.Fatalf("HTTP+JSON answer is not 503 with Retry-After naming the event store: %s", rest)
				}
			}
			for name, series := range map[string]string{"log": "chio_ledger_storage_unavailable 1", "projections": "chio_projection_storage_unavailable 1"} {
				if name == tc.subdir && !strings.Contains(metrics, series) {
					t.Fatalf("/metrics lacks %q:\n%s", series, grep(metrics, "storage_unavailable"))
				}
			}

			filler.Remove(t)
			back := time.Now()
			for {
				if err := c.call(); err == nil {
					break
				} else if time.Since(back) > 30*time.Second {
					t.Fatalf("no call succeeded within 30s of space coming back: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			firstOK := time.Since(back)
			readyAgain := ready.waitReady(t, back, 30*time.Second)
			waitLog(t, up, uint64(c.ok()), 30*time.Second)
			caughtUp := time.Since(back)
			waitProjections(t, up, 30*time.Second)
			t.Logf("space back: first successful call after %v, readiness ok after %v, every receipt in the log after %v, projections caught up after %v",
				firstOK, readyAgain, caughtUp, time.Since(back))

			// Fail closed: every decision in the stream is a call that
			// succeeded, every outcome follows its durable decision, and
			// every successful call has its receipt.
			nc := dialUp(t, up.natsURL, up.dir, natsauth.Reader)
			js, _ := jetstream.New(nc)
			decisions, outcomes := natstest.Decisions(t, js), natstest.Outcomes(t, js)
			for id := range outcomes {
				if _, ok := decisions[id]; !ok {
					t.Fatalf("outcome of %s without a decision", id)
				}
			}
			if len(decisions) != c.ok() {
				t.Fatalf("%d decisions in the stream, %d calls succeeded", len(decisions), c.ok())
			}
			for _, id := range c.receipts() {
				if st, _ := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id); st != http.StatusOK {
					t.Fatalf("receipt %s: %d", id, st)
				}
			}

			switch tc.subdir {
			case "log", "":
				checkLogAgainstRebuild(t, up)
			case "projections":
				checkProjectionsAgainstRebuild(t, up)
			default:
				if err := up.stop(); err != nil {
					t.Fatalf("chio up stopped with %v", err)
				}
			}
		})
	}
}

// ackFloor returns a durable consumer's ack floor on CHIO_EVENTS and the
// stream's last sequence.
func ackFloor(t *testing.T, natsURL, dataDir, durable string) (floor, last uint64) {
	t.Helper()
	nc := dialUp(t, natsURL, dataDir, natsauth.Operator)
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cons, err := js.Consumer(ctx, schemas.EventsStream, durable)
	if err != nil {
		t.Fatalf("consumer %s: %v", durable, err)
	}
	ci, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, schemas.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	si, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ci.AckFloor.Stream, si.State.LastSeq
}

// startUpIn is startUp on a data dir of the caller's.
func startUpIn(t *testing.T, dir string) *upProcess {
	t.Helper()
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	natsRE := regexp.MustCompile(`NATS JetStream on (nats://[0-9.:]+)`)
	out, stop := startCommand(t, httpRE, "up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--grpc-listen", "none")
	return &upProcess{dir: dir, httpURL: httpRE.FindStringSubmatch(out)[1], natsURL: natsRE.FindStringSubmatch(out)[1], token: upOperatorToken(t, dir), stop: stop, out: out}
}

// diskCaller makes tool calls through chio up's OpenAI tool-calls
// endpoint (with the dev capability) and keeps the receipts of those that
// succeeded.
type diskCaller struct {
	t   *testing.T
	url string
	mu  sync.Mutex
	ids []string
	n   int
}

// call makes one call: nil when the tool ran and its receipt is known, the
// answer's reason otherwise.
func (c *diskCaller) call() error {
	c.mu.Lock()
	c.n++
	n := c.n
	c.mu.Unlock()
	raw := fmt.Sprintf(`{"role":"assistant","tool_calls":[{"id":"call_%d","type":"function","function":{"name":"hello_task","arguments":"{\"text\":\"disk %d\"}"}}]}`, n, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("tool call %d: %w", n, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var ans struct {
		Messages []struct {
			Chio openai.Chio `json:"chio"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &ans); resp.StatusCode != http.StatusOK || err != nil || len(ans.Messages) != 1 {
		return fmt.Errorf("tool call %d: HTTP %d: %s", n, resp.StatusCode, body)
	}
	ch := ans.Messages[0].Chio
	if ch.Denied || ch.ReceiptRef == "" {
		return fmt.Errorf("tool call %d: %s (%s)", n, ch.Reason, ch.Decision)
	}
	c.mu.Lock()
	c.ids = append(c.ids, ch.ReceiptRef)
	c.mu.Unlock()
	return nil
}

func (c *diskCaller) ok() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

func (c *diskCaller) receipts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.ids...)
}

// readyWatch polls /readyz every 20 ms and remembers each change of its
// status, with when it was seen and what it said.
type readyWatch struct {
	mu      sync.Mutex
	changes []readyChange
}

type readyChange struct {
	at     time.Time
	status int
	body   health.Response
}

func watchReady(t *testing.T, base string) *readyWatch {
	t.Helper()
	w := &readyWatch{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+health.ReadyPath, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				var r health.Response
				_ = json.NewDecoder(resp.Body).Decode(&r)
				resp.Body.Close()
				w.mu.Lock()
				if n := len(w.changes); n == 0 || w.changes[n-1].status != resp.StatusCode {
					w.changes = append(w.changes, readyChange{at: time.Now(), status: resp.StatusCode, body: r})
				}
				w.mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return w
}

// first returns the first change to status seen after from.
func (w *readyWatch) first(status int, from time.Time) (readyChange, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.changes {
		if c.status == status && !c.at.Before(from) {
			return c, true
		}
	}
	return readyChange{}, false
}

// waitUnready waits for /readyz to answer 503 after from, and returns what
// it said and when.
func (w *readyWatch) waitUnready(t *testing.T, from time.Time, within time.Duration) (health.Response, time.Time) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c, ok := w.first(http.StatusServiceUnavailable, from); ok {
			return c.body, c.at
		}
	}
	t.Fatalf("/readyz still ok %v after the fill", within)
	return health.Response{}, time.Time{}
}

// waitReady waits for /readyz to answer 200 again after from and returns
// how long after from it did.
func (w *readyWatch) waitReady(t *testing.T, from time.Time, within time.Duration) time.Duration {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if c, ok := w.first(http.StatusOK, from); ok {
			return c.at.Sub(from)
		}
	}
	t.Fatalf("/readyz not ok %v after space came back", within)
	return 0
}

// waitLog waits until the log holds n receipts.
func waitLog(t *testing.T, up *upProcess, n uint64, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); logSize(t, up.httpURL) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the log holds %d receipts after %v, want %d", logSize(t, up.httpURL), within, n)
		}
	}
}

// waitProjections waits until no projection is behind its stream.
func waitProjections(t *testing.T, up *upProcess, within time.Duration) {
	t.Helper()
	var last []byte
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, body := httpGetAs(t, up.token, up.httpURL+"/v1/status")
		last = body
		var s projections.Status
		if st != http.StatusOK || json.Unmarshal(body, &s) != nil || len(s.Projections) == 0 {
			continue
		}
		behind := uint64(0)
		for _, p := range s.Projections {
			behind += p.Behind
		}
		if behind == 0 && s.Ledger != nil && s.Ledger.Behind == 0 {
			return
		}
	}
	t.Fatalf("projections still behind after %v: %s", within, last)
}

func scrape(t *testing.T, base string) string {
	t.Helper()
	st, body := httpGet(t, base+"/metrics")
	if st != http.StatusOK {
		t.Fatalf("/metrics: %d", st)
	}
	return string(body)
}

// grep returns the lines of s that contain sub.
func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// a2aSend posts one A2A send to url and returns the answer.
func a2aSend(t *testing.T, url, body string) string {
	t.Helper()
	started := time.Now()
	resp, err := http.Post(url, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	retry := ""
	if v := resp.Header.Get("Retry-After"); v != "" {
		retry = " Retry-After " + v
	}
	return fmt.Sprintf("HTTP %d in %v%s: %s", resp.StatusCode, time.Since(started).Round(time.Millisecond), retry, bytes.TrimSpace(b))
}

// checkLogAgainstRebuild compares the live log's checkpoint with a
// rebuild from the stream, then stops chio up and reopens the store with
// its integrity checks.
func checkLogAgainstRebuild(t *testing.T, up *upProcess) {
	t.Helper()
	_, checkpoint := httpGet(t, up.httpURL+"/log/checkpoint")
	lines := strings.Split(string(checkpoint), "\n")
	if len(lines) < 3 {
		t.Fatalf("checkpoint: %q", checkpoint)
	}
	out, err := chio(context.Background(), "ledger", "rebuild", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Reader), "--edge-issuer", filepath.Join(up.dir, "keys", issuerPubFile), "--data-dir", filepath.Join(t.TempDir(), "rebuilt"), "--keys", filepath.Join(up.dir, "keys"))
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if want := fmt.Sprintf("size %s\nroot %s\n", lines[1], lines[2]); !strings.HasPrefix(out, want) {
		t.Fatalf("rebuild printed %q, want it to start %q", out, want)
	}
	if err := up.stop(); err != nil {
		t.Fatalf("chio up stopped with %v", err)
	}
	_, store, err := openDataDir(up.dir, &ledgerFlags{})
	if err != nil {
		t.Fatalf("reopen the log store: %v", err)
	}
	defer store.Close()
	if size, _ := store.Head(); fmt.Sprint(size) != lines[1] {
		t.Fatalf("reopened log at size %d, checkpoint says %s", size, lines[1])
	}
	if err := store.Err(); err != nil {
		t.Fatalf("reopened store: %v", err)
	}
}

// checkProjectionsAgainstRebuild stops chio up, reads the live
// projections' digest, and compares it with a rebuild from the streams
// (served by an embedded NATS server on chio up's JetStream store).
func checkProjectionsAgainstRebuild(t *testing.T, up *upProcess) {
	t.Helper()
	_, keysJSON := httpGet(t, up.httpURL+"/v1/log/keys")
	var keys struct {
		KernelKey string `json:"kernel_key"`
	}
	if err := json.Unmarshal(keysJSON, &keys); err != nil || keys.KernelKey == "" {
		t.Fatalf("log keys: %v %s", err, keysJSON)
	}
	if err := up.stop(); err != nil {
		t.Fatalf("chio up stopped with %v", err)
	}
	kernel, err := schemas.ParsePublicKey(keys.KernelKey)
	if err != nil {
		t.Fatal(err)
	}
	live, err := projections.Open(projectionsDir(up.dir), projections.WithKernelKey(kernel))
	if err != nil {
		t.Fatalf("reopen the projection store: %v", err)
	}
	digest, err := live.Digest()
	_ = live.Close()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(up.dir, "nats"), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Stop()
	keyFile := filepath.Join(t.TempDir(), "kernel.pub")
	if err := os.WriteFile(keyFile, []byte(keys.KernelKey+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := chio(context.Background(), "projections", "rebuild", "--nats", ns.ClientURL(), "--data-dir", filepath.Join(t.TempDir(), "rebuilt"), "--kernel-key", keyFile)
	if err != nil {
		t.Fatalf("projections rebuild: %v", err)
	}
	if !strings.Contains(out, "digest "+digest+"\n") {
		t.Fatalf("rebuild printed\n%s\nwant digest %s", out, digest)
	}
}
