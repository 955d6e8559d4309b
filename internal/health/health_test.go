package health_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natstest"
)

// serve mounts the probes with checks on a real HTTP server.
func serve(t *testing.T, checks ...health.Check) string {
	t.Helper()
	e := echo.New()
	health.Register(e, checks...)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string) (int, health.Response) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body health.Response
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatalf("GET %s: body is not JSON: %v", url, err)
	}
	return resp.StatusCode, body
}

func ok(name string) health.Check {
	return health.Check{Name: name, Func: func(context.Context) error { return nil }}
}

func failing(name, msg string) health.Check {
	return health.Check{Name: name, Func: func(context.Context) error { return errors.New(msg) }}
}

func TestProbes(t *testing.T) {
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	cases := []struct {
		name       string
		checks     []health.Check
		wantStatus int
		want       map[string]string // check → its message, or a prefix of it
	}{
		{"no checks", nil, 200, map[string]string{}},
		{"all pass", []health.Check{ok("nats"), ok("storage")}, 200, map[string]string{"nats": "ok", "storage": "ok"}},
		{"one fails", []health.Check{ok("storage"), failing("nats", "connection is RECONNECTING")}, 503,
			map[string]string{"nats": "connection is RECONNECTING", "storage": "ok"}},
		{"both fail", []health.Check{failing("storage", "closed"), failing("nats", "down")}, 503,
			map[string]string{"nats": "down", "storage": "closed"}},
		{"a panicking check fails", []health.Check{ok("nats"), {Name: "storage", Func: func(context.Context) error { panic("pebble: closed") }}}, 503,
			map[string]string{"nats": "ok", "storage": "check panicked: pebble: closed"}},
		{"a hung check times out", []health.Check{{Name: "nats", Func: func(context.Context) error { <-hang; return nil }}}, 503,
			map[string]string{"nats": "no answer within"}},
		{"a nil check function fails", []health.Check{{Name: "storage"}}, 503, map[string]string{"storage": "no check function"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			url := serve(t, c.checks...)
			if status, body := get(t, url+health.LivePath); status != 200 || body.Status != "ok" || body.Checks != nil {
				t.Fatalf("/healthz: %d %+v", status, body)
			}
			status, body := get(t, url+health.ReadyPath)
			wantBody := "ok"
			if c.wantStatus != 200 {
				wantBody = "unavailable"
			}
			if status != c.wantStatus || body.Status != wantBody || len(body.Checks) != len(c.want) {
				t.Fatalf("/readyz: %d %+v, want %d %s with %d checks", status, body, c.wantStatus, wantBody, len(c.want))
			}
			for name, msg := range c.want {
				if !strings.HasPrefix(body.Checks[name], msg) {
					t.Errorf("check %s: %q, want %q", name, body.Checks[name], msg)
				}
			}
		})
	}
}

// TestHealthUnderAStoppedNATSNode: health endpoints under a stopped NATS
// node. The process stays alive (/healthz 200) but is not ready: the nats
// and streams checks name what failed.
func TestHealthUnderAStoppedNATSNode(t *testing.T) {
	ns, _, js := natstest.Start(t)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	url := serve(t, health.NATS(js), health.Streams("streams", js, "S"), ok("storage"))
	if status, body := get(t, url+health.ReadyPath); status != 200 || body.Checks["nats"] != "ok" || body.Checks["streams"] != "ok" {
		t.Fatalf("with NATS up: %d %+v", status, body)
	}
	if status, body := get(t, url+health.ReadyPath); status != 200 {
		t.Fatalf("second probe: %d %+v", status, body)
	}

	ns.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body := get(t, url+health.ReadyPath)
		if status == 503 {
			if body.Status != "unavailable" || body.Checks["nats"] == "ok" || body.Checks["streams"] == "ok" || body.Checks["storage"] != "ok" {
				t.Fatalf("with NATS stopped: %+v", body)
			}
			// Either the client has noticed (the connection is not
			// CONNECTED) or the JetStream round trip times out.
			if m := body.Checks["nats"]; !strings.Contains(m, "connection is") && !strings.Contains(m, "jetstream account info") {
				t.Fatalf("nats check: %q", m)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still ready with NATS stopped: %d %+v", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if status, body := get(t, url+health.LivePath); status != 200 || body.Status != "ok" {
		t.Fatalf("/healthz with NATS stopped: %d %+v", status, body)
	}
}

func TestMissingStreamIsNotReady(t *testing.T) {
	_, _, js := natstest.Start(t)
	status, body := get(t, serve(t, health.NATS(js), health.Streams("streams", js, "NOPE"))+health.ReadyPath)
	if status != 503 || body.Checks["nats"] != "ok" || !strings.Contains(body.Checks["streams"], "stream NOPE") {
		t.Fatalf("%d %+v", status, body)
	}
}
