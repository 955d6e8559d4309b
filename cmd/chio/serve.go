package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/internal/health"
)

// serve serves e on ln until ctx ends, then stops (see serveHandler).
func serve(ctx context.Context, e *echo.Echo, ln net.Listener, drainTimeout time.Duration, drains ...func(context.Context) error) error {
	e.Listener = ln
	return serveHandler(ctx, e, ln, drainTimeout, drains...)
}

// serveHandler serves h on ln until ctx ends, then stops in the order a
// load balancer in front of several replicas needs, so that no request is
// lost in the switch:
//
//  1. readiness goes false at once: /readyz answers 503 with the check
//     "draining" naming why ("stopping: SIGTERM received"), and every
//     response carries Connection: close, so the keep-alive connections a
//     proxy holds are closed by the server after an answer, never under a
//     request it is sending;
//  2. requests are still served for the drain delay (withDrainDelay; 0
//     unless the command set one), long enough for the balancer's health
//     check to take the replica out of rotation;
//  3. the listener closes, and the requests in flight and each drain (an
//     edge's background calls; its streams hand over to another replica)
//     run until they finish or drainTimeout passes; the connections still
//     open then are closed.
//
// A drain that ran out of time is logged, not returned: stopping was
// asked for, and it happened.
func serveHandler(ctx context.Context, h http.Handler, ln net.Listener, drainTimeout time.Duration, drains ...func(context.Context) error) error {
	st := &stopping{}
	srv := newHTTPServer(ctx, st.wrap(h))
	errc := make(chan error, 1)
	go func() {
		if srv.TLSConfig != nil {
			errc <- srv.ServeTLS(ln, "", "") // the certificate comes from TLSConfig (--tls-cert)
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	reason := stopReason(ctx)
	unready := time.Now()
	st.begin(reason)
	delay := drainDelay(ctx)
	slog.Info("stopping: readiness is false; serving on for the drain delay", "addr", ln.Addr().String(), "reason", reason, "drain_delay", delay)
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case err := <-errc: // the server failed meanwhile: nothing left to wait for
			t.Stop()
			slog.Warn("http server stopped during the drain delay", "err", err)
		}
	}
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	errs := make([]error, len(drains)+1)
	var wg sync.WaitGroup
	for i, drain := range drains {
		wg.Go(func() { errs[i+1] = drain(dctx) })
	}
	// Shutdown closes the listener first: from here a dial is refused,
	// which a proxy retries on another replica (it never reached this one).
	wg.Go(func() {
		if err := srv.Shutdown(dctx); err != nil {
			_ = srv.Close() // cut what is left: long streams, slow clients
			errs[0] = fmt.Errorf("http shutdown: %w", err)
		}
	})
	slog.Info("stopping: listener closing; draining", "addr", ln.Addr().String(), "unready_for", time.Since(unready).Round(time.Millisecond))
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		slog.Warn("stopped before every request in flight finished", "drain_timeout", drainTimeout, "err", err)
	}
	slog.Info("stopping: drained", "addr", ln.Addr().String(), "took", time.Since(unready).Round(time.Millisecond))
	return nil
}

// drainCheck is the name of the readiness check a stopping server fails.
const drainCheck = "draining"

// stopping is one server's stop: once begun, its readiness probe fails
// and every answer closes its connection.
type stopping struct {
	reason atomic.Pointer[string]
}

func (s *stopping) begin(reason string) { s.reason.Store(&reason) }

// wrap answers /readyz itself while stopping (the checks of the handler
// behind it no longer matter: the process is leaving) and marks every
// other answer Connection: close; before that it is h.
func (s *stopping) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reason := s.reason.Load()
		if reason == nil {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Connection", "close")
		if r.URL.Path != health.ReadyPath || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
			h.ServeHTTP(w, r)
			return
		}
		body, _ := json.Marshal(health.Response{Status: health.StatusUnavailable, Checks: map[string]string{drainCheck: *reason}})
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusServiceUnavailable)
		if r.Method == http.MethodGet {
			_, _ = w.Write(append(body, '\n'))
		}
	})
}

// stopReason says why ctx ended, as the readiness probe reports it. A
// signal.NotifyContext context ends with a cause reading "<signal> signal
// received" (its type is not exported, so the text is matched).
func stopReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil {
		return "stopping"
	}
	for _, s := range []struct {
		sig  os.Signal
		name string
	}{{syscall.SIGTERM, "SIGTERM"}, {os.Interrupt, "SIGINT"}} {
		if cause.Error() == s.sig.String()+" signal received" {
			return "stopping: " + s.name + " received"
		}
	}
	if errors.Is(cause, context.Canceled) { // a signal's cause is one too: checked after
		return "stopping"
	}
	return "stopping: " + cause.Error()
}

// drainDelayKey carries a command's drain delay to its serve loops.
type drainDelayKey struct{}

// withDrainDelay asks every serve loop run under ctx to keep serving for d
// after ctx ends, its readiness already false, before it closes its
// listener. It travels in the context because the loops of one command
// are started in several places (chio up serves its edges from the
// ledger's server).
func withDrainDelay(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, drainDelayKey{}, d)
}

func drainDelay(ctx context.Context) time.Duration {
	d, _ := ctx.Value(drainDelayKey{}).(time.Duration)
	return max(d, 0)
}

// defaultDrainDelay is the edges' drain delay: a few of the shipped
// Caddyfile's one-second health checks, so the proxy has stopped sending
// before the listener closes.
const defaultDrainDelay = 5 * time.Second

// registerDrainDelay adds --drain-delay, with default def.
func registerDrainDelay(f *pflag.FlagSet, d *time.Duration, def time.Duration) {
	f.DurationVar(d, "drain-delay", def, "on SIGTERM/SIGINT, how long to keep serving with /readyz answering 503 (check \""+drainCheck+
		"\") before the listener closes: time for a load balancer's health check to take this replica out of rotation; then calls in flight get --drain-timeout")
}
