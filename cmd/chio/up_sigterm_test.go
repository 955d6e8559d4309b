package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"
)

// upBinary builds chio once for the tests that need it as a process of its
// own (to get a real SIGTERM).
func upBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chio")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chio: %v\n%s", err, out)
	}
	return bin
}

// upChild is chio up running as a child process.
type upChild struct {
	cmd     *exec.Cmd
	httpURL string
	exited  chan error
	stderr  *syncBuffer
}

func startUpChild(t *testing.T, bin, dir string, extra ...string) *upChild {
	t.Helper()
	args := append([]string{"up", "--data-dir", dir, "--listen", "127.0.0.1:0", "--nats-listen", "none", "--grpc-listen", "none"}, extra...)
	cmd := exec.Command(bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &upChild{cmd: cmd, exited: make(chan error, 1), stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}) // closed once the process has been waited for
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		c.exited <- cmd.Wait()
		close(done)
	}()
	select {
	case c.httpURL = <-addr:
	case err := <-c.exited:
		c.exited <- err
		t.Fatalf("chio up exited while starting: %v\n%s", err, c.stderr.String())
	case <-time.After(time.Minute):
		t.Fatalf("chio up did not start:\n%s", c.stderr.String())
	}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(c.httpURL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return c
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("chio up never became ready:\n%s", c.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// upAnswer is one call as its client saw it: answered (with the receipt
// id the edge gave it) or not, and when.
type upAnswer struct {
	receipt string
	at      time.Time
	err     error
}

// sendHello makes one message/send call to chio up (as the dev capability).
func sendHello(client *http.Client, url string, n int) upAnswer {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"message/send","params":{"message":{"role":"user","messageId":"sigterm-%d","parts":[{"kind":"text","text":"world"}]}}}`, n, n)
	resp, err := client.Post(url+"/a2a", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		return upAnswer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	at := time.Now()
	if err != nil {
		return upAnswer{err: err}
	}
	var r struct {
		Result struct {
			Status   struct{ State string }
			Metadata struct {
				Chio struct {
					ReceiptID string `json:"receiptId"`
				} `json:"chio"`
			}
		}
		Error json.RawMessage
	}
	if err := json.Unmarshal(b, &r); err != nil || resp.StatusCode != http.StatusOK || r.Error != nil || r.Result.Metadata.Chio.ReceiptID == "" {
		return upAnswer{err: fmt.Errorf("answer %d: %s", resp.StatusCode, b)}
	}
	if r.Result.Status.State != "completed" {
		return upAnswer{err: fmt.Errorf("task %s: %s", r.Result.Status.State, b)}
	}
	return upAnswer{receipt: r.Result.Metadata.Chio.ReceiptID, at: at}
}

// chio up stopped by SIGTERM under load: readiness goes false first, calls
// are still answered for --drain-delay, then the listener closes and the
// process exits 0. Restarted on the same data dir, it has the receipt of
// every call it answered, those answered after its readiness went false
// included.
func TestUpSIGTERMKeepsEveryAnsweredCall(t *testing.T) {
	bin := upBinary(t)
	dir := t.TempDir()
	const delay = 2 * time.Second
	up := startUpChild(t, bin, dir, "--drain-delay", delay.String())

	var (
		mu      sync.Mutex
		answers []upAnswer
		unready time.Time // first 503 from /readyz
	)
	stopLoad := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			// Keep-alive connections, as a client's pool holds them.
			client := &http.Client{Timeout: 30 * time.Second}
			for i := 0; ; i++ {
				select {
				case <-stopLoad:
					return
				default:
				}
				a := sendHello(client, up.httpURL, w*100000+i)
				mu.Lock()
				answers = append(answers, a)
				mu.Unlock()
				if a.err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stopLoad:
				return
			default:
			}
			resp, err := http.Get(up.httpURL + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusServiceUnavailable {
					mu.Lock()
					if unready.IsZero() {
						unready = time.Now()
					}
					mu.Unlock()
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
	time.Sleep(time.Second)
	sent := time.Now()
	if err := up.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	select {
	case exitErr = <-up.exited:
	case <-time.After(time.Minute):
		t.Fatalf("chio up did not exit within a minute of SIGTERM:\n%s", up.stderr.String())
	}
	exitedAt := time.Now()
	close(stopLoad)
	wg.Wait()
	if exitErr != nil {
		t.Fatalf("chio up exited with %v after SIGTERM:\n%s", exitErr, up.stderr.String())
	}
	for _, want := range []string{`reason="stopping: SIGTERM received"`, "stopping: listener closing"} {
		if !bytes.Contains([]byte(up.stderr.String()), []byte(want)) {
			t.Errorf("chio up's log lacks %q:\n%s", want, up.stderr.String())
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if unready.IsZero() {
		t.Fatal("readiness never went false before the exit")
	}
	answered, afterUnready, refused := 0, 0, 0
	for _, a := range answers {
		switch {
		case a.err == nil:
			answered++
			if a.at.After(unready) {
				afterUnready++
			}
		case errors.Is(a.err, syscall.ECONNREFUSED):
			refused++ // no answer at all: the listener had closed
		}
	}
	if afterUnready == 0 {
		t.Errorf("no call was answered while readiness was false (the %s drain delay)", delay)
	}

	// Restarted on the same data dir: every answered call has its receipt.
	again := startUpChild(t, bin, dir)
	token := upOperatorToken(t, dir)
	client := &http.Client{Timeout: 10 * time.Second}
	missing := 0
	deadline := time.Now().Add(time.Minute)
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		for {
			req, _ := http.NewRequest(http.MethodGet, again.httpURL+"/v1/receipts/"+a.receipt, nil)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := client.Do(req)
			code := 0
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			if code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				missing++
				t.Errorf("receipt %s of a call answered at %s (readiness false at %s) is not in the log after the restart (%d %v)",
					a.receipt, a.at.Format(time.RFC3339Nano), unready.Format(time.RFC3339Nano), code, err)
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	t.Logf("calls %d: answered %d (%d after readiness went false), not answered %d (%d refused at the closed listener); readiness false %s after SIGTERM, exit %s after; receipts missing after restart %d",
		len(answers), answered, afterUnready, len(answers)-answered, refused, unready.Sub(sent).Round(time.Millisecond), exitedAt.Sub(sent).Round(time.Millisecond), missing)
	if answered == 0 {
		t.Fatal("no call was answered")
	}
}
