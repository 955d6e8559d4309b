// Package health serves the liveness and readiness probes every chio
// process answers: GET /healthz (the process is alive) and GET /readyz
// (every dependency it needs answers: NATS, its stores, its streams).
//
// It is process plumbing shared by cmd/chio's commands; it knows nothing
// of edges, the ledger or projections beyond the checks they hand it.
package health

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Paths of the probes.
const (
	LivePath  = "/healthz"
	ReadyPath = "/readyz"
)

// Timeout bounds one readiness probe: a check that has not answered by
// then fails, so a hung dependency makes the process unready instead of
// hanging its probe.
const Timeout = 2 * time.Second

// Check is one readiness condition: Func returns nil when it holds.
type Check struct {
	Name string
	Func func(context.Context) error
}

// Response is the JSON body of both probes. Checks maps each check's name
// to "ok" or its error; /healthz has none.
type Response struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks,omitempty"`
}

// Statuses of a Response.
const (
	StatusOK          = "ok"
	StatusUnavailable = "unavailable"
)

// Register mounts /healthz and /readyz on e (GET and HEAD). Neither needs
// a token: probes come from orchestrators and load balancers.
func Register(e *echo.Echo, checks ...Check) {
	methods := []string{http.MethodGet, http.MethodHead}
	e.Match(methods, LivePath, func(c echo.Context) error {
		return c.JSON(http.StatusOK, Response{Status: StatusOK})
	})
	e.Match(methods, ReadyPath, func(c echo.Context) error {
		res := Evaluate(c.Request().Context(), checks...)
		status := http.StatusOK
		if res.Status != StatusOK {
			status = http.StatusServiceUnavailable
		}
		c.Response().Header().Set("Cache-Control", "no-store")
		return c.JSON(status, res)
	})
}

// Evaluate runs the checks concurrently, each bounded by Timeout, and
// reports ok only if all of them pass.
func Evaluate(ctx context.Context, checks ...Check) Response {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	res := Response{Status: StatusOK, Checks: make(map[string]string, len(checks))}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, ch := range checks {
		wg.Go(func() {
			msg := StatusOK
			if err := run(ctx, ch); err != nil {
				msg = err.Error()
			}
			mu.Lock()
			defer mu.Unlock()
			res.Checks[ch.Name] = msg
			if msg != StatusOK {
				res.Status = StatusUnavailable
			}
		})
	}
	wg.Wait()
	return res
}

// run runs one check, turning a panic or a check that ignores its
// context's deadline into an error: a probe must answer, and a broken
// check must not take the process down.
func run(ctx context.Context, ch Check) error {
	if ch.Func == nil {
		return errors.New("no check function")
	}
	done := make(chan error, 1) // buffered: a late check must not leak blocked
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- fmt.Errorf("check panicked: %v", r)
			}
		}()
		done <- ch.Func(ctx)
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer within %s: %w", Timeout, ctx.Err())
	}
}

// natsTimeout bounds the JetStream round trip of the NATS check.
const natsTimeout = time.Second

// NATS is the "nats" check: the connection is CONNECTED and JetStream
// answers an account info request.
func NATS(js jetstream.JetStream) Check {
	return Check{Name: "nats", Func: func(ctx context.Context) error {
		if st := js.Conn().Status(); st != nats.CONNECTED {
			return fmt.Errorf("connection is %s", st)
		}
		ctx, cancel := context.WithTimeout(ctx, natsTimeout)
		defer cancel()
		if _, err := js.AccountInfo(ctx); err != nil {
			return fmt.Errorf("jetstream account info: %w", err)
		}
		return nil
	}}
}

// Streams is a check named name that each JetStream stream exists and
// answers (looking a stream up asks its leader for its info). A KV bucket
// B is the stream KV_B.
func Streams(name string, js jetstream.JetStream, streams ...string) Check {
	return Check{Name: name, Func: func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, natsTimeout)
		defer cancel()
		var errs []error
		for _, s := range streams {
			if _, err := js.Stream(ctx, s); err != nil {
				errs = append(errs, fmt.Errorf("stream %s: %w", s, err))
			}
		}
		return errors.Join(errs...)
	}}
}
