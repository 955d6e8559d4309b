package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/chio-ledger/chio/schemas/dpop"
)

// The load generator of the edge and scaleout sections: the same code
// drives every server. Each request is an A2A 1.0 JSON-RPC SendMessage
// with a fresh messageId, sent over keep-alive HTTP/1.1; every answer is
// checked (HTTP 200, a JSON-RPC result with the request's id, no error,
// the expected task state), and anything else counts as an error.

// Target is the endpoint under load and what a good answer looks like.
type Target struct {
	// URL is the JSON-RPC endpoint.
	URL string
	// Header is sent with every request (Authorization, A2A-Version).
	Header http.Header
	// State is the task state every answer must carry.
	State string
	// Signer, when set, signs every request: Authorization: DPoP and a
	// fresh proof (its cost is the generator's).
	Signer *dpop.Signer
	// RootCAs, when set, are the roots an https URL's certificate must
	// chain to (the cluster proxy's internal CA).
	RootCAs *x509.CertPool
}

// LoadResult is one load run's outcome. Requests and latencies count only
// those that completed inside the measured window; OK and Errors count the
// whole run, warm-up included, so that no failure goes unseen.
type LoadResult struct {
	Concurrency int           // closed loop: workers; open loop: 0
	Offered     float64       // open loop: scheduled arrivals per second
	Window      time.Duration // the measured window
	Requests    int           // successful requests completed in the window
	Lat         Latencies     // their latencies
	OK, Errors  int
	FirstError  string
}

// Rate is the successful requests per second in the measured window.
func (r *LoadResult) Rate() float64 {
	if r.Window <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Window.Seconds()
}

// Err is non-nil when any request failed: such a run is not a throughput.
func (r *LoadResult) Err() error {
	if r.Errors == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d requests failed; first: %s", r.Errors, r.Errors+r.OK, r.FirstError)
}

// newLoadClient is an HTTP client that keeps a connection per worker.
func newLoadClient(conns int, roots *x509.CertPool) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: roots},
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        conns + 16,
			MaxIdleConnsPerHost: conns + 16,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
			ForceAttemptHTTP2:   false,
		},
	}
}

// sender is one worker's state: its reusable body buffer and decoder
// scratch, so that the generator allocates little per request.
type sender struct {
	c      *http.Client
	t      *Target
	prefix string // unique per worker and run: messageIds never repeat
	n      int64
	body   []byte
	resp   bytes.Buffer
}

func newSender(c *http.Client, t *Target, run string, worker int) *sender {
	return &sender{c: c, t: t, prefix: run + "-" + strconv.Itoa(worker) + "-"}
}

// rpcAnswer is the part of a SendMessage answer that is checked.
type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
	Result *struct {
		Task *struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		} `json:"task"`
	} `json:"result"`
}

// send posts one SendMessage and checks the answer.
func (s *sender) send(ctx context.Context) error {
	s.n++
	b := append(s.body[:0], `{"jsonrpc":"2.0","id":`...)
	b = strconv.AppendInt(b, s.n, 10)
	b = append(b, `,"method":"SendMessage","params":{"message":{"role":"ROLE_USER","messageId":"`...)
	b = append(b, s.prefix...)
	b = strconv.AppendInt(b, s.n, 10)
	b = append(b, `","parts":[{"text":"world"}]}}}`...)
	s.body = b
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.t.URL, bytes.NewReader(b))
	if err != nil {
		return err
	}
	for k, v := range s.t.Header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	if s.t.Signer != nil {
		if err := s.t.Signer.Authorize(req.Header, http.MethodPost, s.t.URL); err != nil {
			return err
		}
	}
	resp, err := s.c.Do(req)
	if err != nil {
		return err
	}
	s.resp.Reset()
	_, err = s.resp.ReadFrom(resp.Body)
	resp.Body.Close()
	if err != nil {
		return fmt.Errorf("read answer: %w", err)
	}
	return checkAnswer(resp.StatusCode, s.resp.Bytes(), s.n, s.t.State)
}

// checkAnswer accepts only a 200 carrying a JSON-RPC result for request id
// with a task in the expected state.
func checkAnswer(status int, body []byte, id int64, state string) error {
	if status != http.StatusOK {
		return fmt.Errorf("HTTP %d: %.200s", status, body)
	}
	var a rpcAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("answer is not JSON: %w: %.200s", err, body)
	}
	switch {
	case a.JSONRPC != "2.0":
		return fmt.Errorf("not a JSON-RPC 2.0 answer: %.200s", body)
	case a.Error != nil:
		return fmt.Errorf("JSON-RPC error %d: %s", a.Error.Code, a.Error.Message)
	case string(a.ID) != strconv.FormatInt(id, 10):
		return fmt.Errorf("answer for id %s, sent %d", a.ID, id)
	case a.Result == nil || a.Result.Task == nil:
		return fmt.Errorf("result is not a task: %.200s", body)
	case a.Result.Task.Status.State != state:
		return fmt.Errorf("task state %q, want %q", a.Result.Task.Status.State, state)
	}
	return nil
}

// tally gathers the workers' counts under one lock, once per worker.
type tally struct {
	mu  sync.Mutex
	res LoadResult
}

func (t *tally) add(lat Latencies, inWindow, ok, errs int, firstErr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res.Lat = append(t.res.Lat, lat...)
	t.res.Requests += inWindow
	t.res.OK += ok
	t.res.Errors += errs
	if t.res.FirstError == "" {
		t.res.FirstError = firstErr
	}
}

// closedLoop runs conc workers back to back for warm+dur; the figures are
// those of requests that completed within the window [warm, warm+dur):
// counting completions, not starts, so that neither the window's edges nor
// a slow tail that straddles its end is trimmed from rate or percentiles.
func closedLoop(ctx context.Context, t *Target, conc int, warm, dur time.Duration) (*LoadResult, error) {
	c := newLoadClient(conc, t.RootCAs)
	defer c.CloseIdleConnections()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	start := time.Now()
	from, until := start.Add(warm), start.Add(warm+dur)
	var tl tally
	var wg sync.WaitGroup
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSender(c, t, run, w)
			lat := make(Latencies, 0, 4096)
			var ok, errs, in int
			var firstErr string
			for ctx.Err() == nil {
				t0 := time.Now()
				if !t0.Before(until) {
					break
				}
				err := s.send(ctx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() != nil {
						break
					}
					errs++
					if firstErr == "" {
						firstErr = err.Error()
					}
					continue
				}
				ok++
				if !t1.Before(from) && t1.Before(until) {
					in++
					lat = append(lat, t1.Sub(t0))
				}
			}
			tl.add(lat, in, ok, errs, firstErr)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tl.res.Concurrency, tl.res.Window = conc, dur
	return &tl.res, nil
}

// openLoop sends at a fixed rate for warm+dur whatever the server does:
// arrivals are scheduled at start+i/rate, and each latency runs from the
// scheduled time, so a server that falls behind shows its queueing rather
// than slowing the generator down (no coordinated omission). maxInFlight
// bounds the connections; a request that finds them all busy waits, and
// its wait counts in its latency.
func openLoop(ctx context.Context, t *Target, rate float64, warm, dur time.Duration, maxInFlight int) (*LoadResult, error) {
	if rate <= 0 {
		return nil, fmt.Errorf("open loop: rate %v", rate)
	}
	c := newLoadClient(maxInFlight, t.RootCAs)
	defer c.CloseIdleConnections()
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	interval := time.Duration(float64(time.Second) / rate)
	total := int((warm + dur) / interval)
	start := time.Now()
	from, until := start.Add(warm), start.Add(warm+dur)
	// The pacer hands out scheduled times; a buffered channel as deep as
	// the whole run means the pacer itself never blocks on busy workers.
	due := make(chan time.Time, total)
	var tl tally
	var wg sync.WaitGroup
	for w := range maxInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := newSender(c, t, run, w)
			var lat Latencies
			var ok, errs, in int
			var firstErr string
			for at := range due {
				if ctx.Err() != nil {
					continue // drain
				}
				err := s.send(ctx)
				t1 := time.Now()
				if err != nil {
					if ctx.Err() == nil {
						errs++
						if firstErr == "" {
							firstErr = err.Error()
						}
					}
					continue
				}
				ok++
				if !at.Before(from) && at.Before(until) {
					lat = append(lat, t1.Sub(at))
				}
				if !t1.Before(from) && t1.Before(until) {
					in++ // achieved: completions within the window
				}
			}
			tl.add(lat, in, ok, errs, firstErr)
		}()
	}
pace:
	for i := range total {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				break pace
			case <-time.After(d):
			}
		}
		due <- at
	}
	close(due)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// Latencies are those of the arrivals scheduled in the window, however
	// late they completed; achieved = completions within the window /
	// window, so a server that falls behind shows a lower achieved rate.
	tl.res.Offered, tl.res.Window = rate, dur
	return &tl.res, nil
}

// drainBody is for callers that only need a status code.
func drainBody(r io.ReadCloser) {
	_, _ = io.Copy(io.Discard, r)
	_ = r.Close()
}
