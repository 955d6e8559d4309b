package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeA2A answers SendMessage with a task in state, or with what answer
// returns when it is set.
func fakeA2A(t *testing.T, state string, answer func(id json.RawMessage) (int, string)) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Message struct {
					MessageID string `json:"messageId"`
				} `json:"message"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Method != "SendMessage" || req.Params.Message.MessageID == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		if answer != nil {
			code, body := answer(req.ID)
			w.WriteHeader(code)
			fmt.Fprint(w, body)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"task":{"id":"t","status":{"state":%q}}}}`, req.ID, state)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestCheckAnswer(t *testing.T) {
	for _, c := range []struct {
		name, body string
		status     int
		ok         bool
	}{
		{"completed task", `{"jsonrpc":"2.0","id":7,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"}}}}`, 200, true},
		{"JSON-RPC error", `{"jsonrpc":"2.0","id":7,"error":{"code":-31401,"message":"no capability"}}`, 200, false},
		{"other state", `{"jsonrpc":"2.0","id":7,"result":{"task":{"status":{"state":"TASK_STATE_FAILED"}}}}`, 200, false},
		{"other id", `{"jsonrpc":"2.0","id":8,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"}}}}`, 200, false},
		{"message, not task", `{"jsonrpc":"2.0","id":7,"result":{"message":{"role":"ROLE_AGENT"}}}`, 200, false},
		{"HTTP 500", `{"jsonrpc":"2.0","id":7,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"}}}}`, 500, false},
		{"not JSON", `<html>`, 200, false},
	} {
		err := checkAnswer(c.status, []byte(c.body), 7, completed)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func TestClosedLoopCountsRPCErrors(t *testing.T) {
	s := fakeA2A(t, "", func(id json.RawMessage) (int, string) {
		return 200, `{"jsonrpc":"2.0","id":` + string(id) + `,"error":{"code":-32603,"message":"boom"}}`
	})
	res, err := closedLoop(context.Background(), &Target{URL: s.URL, State: completed}, 2, 0, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors == 0 || res.OK != 0 || res.Requests != 0 || res.Err() == nil || !strings.Contains(res.FirstError, "boom") {
		t.Fatalf("errors not counted: %+v", res)
	}
	side := edgeSide{runs: []*LoadResult{res}}
	if _, ok := side.rate(); ok || !strings.Contains(side.rateCell(), "errors") {
		t.Fatalf("a run with errors reads as a rate: %q", side.rateCell())
	}
}

func TestClosedLoopOK(t *testing.T) {
	s := fakeA2A(t, completed, nil)
	res, err := closedLoop(context.Background(), &Target{URL: s.URL, State: completed}, 4, 20*time.Millisecond, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 || res.Requests == 0 || len(res.Lat) != res.Requests || res.OK < res.Requests {
		t.Fatalf("%+v", res)
	}
}

// A server that takes 10 ms per request one at a time, offered 200/s,
// falls behind; latencies measured from the schedule must show the queue
// (a closed loop, or timing from the actual send, would hide it).
func TestOpenLoopMeasuresFromSchedule(t *testing.T) {
	var mu sync.Mutex
	s := fakeA2A(t, "", func(id json.RawMessage) (int, string) {
		mu.Lock()
		time.Sleep(10 * time.Millisecond)
		mu.Unlock()
		return 200, `{"jsonrpc":"2.0","id":` + string(id) + `,"result":{"task":{"status":{"state":"TASK_STATE_COMPLETED"}}}}`
	})
	res, err := openLoop(context.Background(), &Target{URL: s.URL, State: completed}, 200, 0, 300*time.Millisecond, 64)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 {
		t.Fatal(res.Err())
	}
	// 60 arrivals at 100/s capacity: the last waits ~300 ms.
	if p99 := res.Lat.Pct(0.99); p99 < 150*time.Millisecond {
		t.Fatalf("p99 %s: queueing hidden", p99)
	}
}

func TestTailFile(t *testing.T) {
	p := t.TempDir() + "/log"
	if err := writeFile(p, "a\nb\nc\nd\n"); err != nil {
		t.Fatal(err)
	}
	if got := tailFile(p, 2); got != "c\nd" {
		t.Fatalf("tail = %q", got)
	}
}

func TestMetricValue(t *testing.T) {
	text := "x_sum{a=\"1\"} 0.5\nx_count{a=\"1\"} 4\n"
	if v := metricValue(text, `x_count{a="1"}`); v != 4 {
		t.Fatalf("got %v", v)
	}
	if v := metricValue(text, `y`); v != 0 {
		t.Fatalf("got %v", v)
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
