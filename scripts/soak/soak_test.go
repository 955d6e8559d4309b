package main

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	acpsdk "github.com/coder/acp-go-sdk"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	cases := []struct {
		in   []time.Duration
		q    float64
		want time.Duration
	}{
		{nil, 0.99, 0},
		{ms(7), 0.5, 7 * time.Millisecond},
		{ms(5, 1, 3, 2, 4), 0.5, 3 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.99, 10 * time.Millisecond},
		{ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 0.9, 9 * time.Millisecond},
	}
	for _, c := range cases {
		if got := percentile(c.in, c.q); got != c.want {
			t.Errorf("percentile(%v, %v) = %v, want %v", c.in, c.q, got, c.want)
		}
	}
}

// The round holds each operation as often as its weight, and no surface
// runs twice in a row while another is waiting.
func TestSchedule(t *testing.T) {
	ops := mix(false)
	round := schedule(ops)
	count := map[int]int{}
	total := 0
	for _, o := range ops {
		total += o.weight
	}
	if len(round) != total {
		t.Fatalf("round of %d, want %d", len(round), total)
	}
	for _, i := range round {
		count[i]++
	}
	for i, o := range ops {
		if count[i] != o.weight {
			t.Errorf("%s: %d in the round, want %d", o.name, count[i], o.weight)
		}
	}
	if round[0] == round[1] {
		t.Errorf("round starts with %s twice", ops[round[0]].name)
	}
}

func TestFit(t *testing.T) {
	cases := []struct {
		name                string
		x, y                []float64
		slope, icpt, spread float64
	}{
		{"line", []float64{0, 1, 2, 3}, []float64{1, 3, 5, 7}, 2, 1, 0},
		{"flat", []float64{0, 1, 2}, []float64{4, 4, 4}, 0, 4, 0},
		{"one point", []float64{5}, []float64{9}, 0, 9, 0},
		{"noise around a flat line", []float64{0, 1, 2, 3}, []float64{1, -1, 1, -1}, -0.4, 0.6, math.Sqrt(0.8)},
	}
	for _, c := range cases {
		s, i, sc := fit(c.x, c.y)
		if math.Abs(s-c.slope) > 1e-9 || math.Abs(i-c.icpt) > 1e-9 || math.Abs(sc-c.spread) > 1e-9 {
			t.Errorf("%s: fit = %v, %v, %v; want %v, %v, %v", c.name, s, i, sc, c.slope, c.icpt, c.spread)
		}
	}
}

func TestNiceTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		top    float64
	}{
		{0, 97, 100},
		{0, 0.3, 0.3},
		{0, 60, 60},
		{0, 0, 1},
	}
	for _, c := range cases {
		ticks, top := niceTicks(c.lo, c.hi)
		if math.Abs(top-c.top) > 1e-9 || top < c.hi || ticks[0] != c.lo || len(ticks) < 2 || len(ticks) > 12 {
			t.Errorf("niceTicks(%v, %v) = %v (top %v), want top %v", c.lo, c.hi, ticks, top, c.top)
		}
	}
}

func TestParseMetric(t *testing.T) {
	exp := "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines 231\ngo_goroutines_other 5\n"
	if v, err := parseMetric(strings.NewReader(exp), "go_goroutines"); err != nil || v != 231 {
		t.Fatalf("go_goroutines = %v, %v", v, err)
	}
	if _, err := parseMetric(strings.NewReader(exp), "process_open_fds"); err == nil {
		t.Fatal("a missing series is an error")
	}
}

// The plot has one panel per series, labelled axes, and no line through a
// window without calls.
func TestPlot(t *testing.T) {
	var samples []sample
	for i := range 5 {
		s := sample{at: time.Duration(i) * 15 * time.Second, rss: int64(50+i) << 20, goroutines: 200, fds: 40, disk: int64(i) << 20, logSize: 100 * i,
			errors: map[string]int{}}
		if i > 0 {
			s.ok, s.p50, s.p99 = 450, 5*time.Millisecond, 40*time.Millisecond
		}
		samples = append(samples, s)
	}
	svg := plot("test <run>", samples)
	for _, want := range []string{"<svg", "test &lt;run&gt;", "Resident memory", "Goroutines", "Open file descriptors", "Bytes under the data directory",
		"Receipts in the log", "Call latency", "Calls per second", "elapsed (minutes)", ">MiB<", ">ms<", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if strings.Contains(svg, "NaN") {
		t.Error("plot has NaN coordinates")
	}
}

// The ACP SDK's client runs over httpLines against a real HTTP server:
// answers reach their callers, and a request the server cannot answer
// fails that call instead of hanging it.
func TestHTTPLines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &req); err != nil {
			http.Error(w, "bad", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		switch req.Method {
		case "initialize":
			_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"result":{"protocolVersion":1,"agentCapabilities":{},"authMethods":[]}}` + "\n"))
		case "_chio/tool/invoke":
			_, _ = w.Write([]byte("{\n  \"jsonrpc\": \"2.0\",\n  \"id\": " + string(req.ID) + ",\n  \"result\": {\"receiptId\": \"r1\"}\n}\n"))
		default:
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	tr := newHTTPLines(srv.Client(), srv.URL)
	defer tr.Close()
	conn := acpsdk.NewClientSideConnection(noEditor{}, tr, tr.Reader())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Initialize(ctx, acpsdk.InitializeRequest{ProtocolVersion: acpsdk.ProtocolVersionNumber}); err != nil {
		t.Fatalf("initialize: %v", err)
	}
	for range 3 {
		raw, err := conn.CallExtension(ctx, "_chio/tool/invoke", map[string]any{"capabilityId": "x"})
		if err != nil || !strings.Contains(string(raw), `"receiptId":"r1"`) {
			t.Fatalf("invoke: %s %v", raw, err)
		}
	}
	if _, err := conn.CallExtension(ctx, "_chio/unknown", nil); err == nil || !strings.Contains(err.Error(), "HTTP 502") {
		t.Fatalf("a 502 without a body: %v", err)
	}
}
