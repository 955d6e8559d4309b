package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
)

// serve serves e on ln until ctx ends, then drains: it stops accepting and
// gives the requests in flight, and each drain (an edge's background
// calls) run alongside, until drainTimeout to finish; the connections
// still open then are closed. A drain that ran out of time is logged, not
// returned: stopping was asked for, and it happened.
func serve(ctx context.Context, e *echo.Echo, ln net.Listener, drainTimeout time.Duration, drains ...func(context.Context) error) error {
	e.Listener = ln
	return serveHandler(ctx, e, ln, drainTimeout, drains...)
}

// serveHandler is serve for any handler.
func serveHandler(ctx context.Context, h http.Handler, ln net.Listener, drainTimeout time.Duration, drains ...func(context.Context) error) error {
	srv := newHTTPServer(ctx, h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	dctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	defer cancel()
	errs := make([]error, len(drains)+1)
	var wg sync.WaitGroup
	for i, drain := range drains {
		wg.Go(func() { errs[i+1] = drain(dctx) })
	}
	if err := srv.Shutdown(dctx); err != nil {
		_ = srv.Close() // cut what is left: long streams, slow clients
		errs[0] = fmt.Errorf("http shutdown: %w", err)
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		slog.Warn("stopped before every request in flight finished", "drain_timeout", drainTimeout, "err", err)
	}
	return nil
}
