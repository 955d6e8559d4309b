package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/internal/tracing"
)

// tracingShutdownWithin bounds the flush of the spans still queued when
// a command stops.
const tracingShutdownWithin = 5 * time.Second

// startTracing builds the command's tracer provider from the OTEL_*
// environment (docs/tracing.md): nil, and nothing started, when tracing
// is off. stop flushes what is queued; defer it first, so it runs after
// everything that makes spans has stopped.
func startTracing(ctx context.Context, service string) (trace.TracerProvider, func(), error) {
	cfg, err := tracing.FromEnv(os.Getenv, service)
	if err != nil {
		return nil, nil, usageError(err)
	}
	p, err := tracing.Start(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if cfg.Enabled {
		slog.Info("tracing: exporting spans over OTLP", "protocol", cfg.Protocol, "service", cfg.ServiceName)
	}
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), tracingShutdownWithin)
		defer cancel()
		if err := p.Shutdown(sctx); err != nil {
			slog.Warn("tracing: spans lost at shutdown", "err", err)
		}
	}
	return p.TracerProvider, stop, nil
}

// serveTraced is serve with an HTTP server span per request, named after
// its Echo route, when tp traces; serve itself otherwise.
func serveTraced(ctx context.Context, e *echo.Echo, tp trace.TracerProvider, ln net.Listener, drainTimeout time.Duration, drains ...func(context.Context) error) error {
	if !tracing.Enabled(tp) {
		return serve(ctx, e, ln, drainTimeout, drains...)
	}
	e.Listener = ln
	e.Use(tracing.EchoRoute())
	return serveHandler(ctx, tracing.HTTPHandler(e, tp), ln, drainTimeout, drains...)
}

// startTracing starts tracing for a standalone edge command, its
// governance traced under service: ef.tracer is set for the kernel and
// dispatcher built after it. Defer the returned stop at once.
func (ef *edgeFlags) startTracing(ctx context.Context, service string) (func(), error) {
	tp, stop, err := startTracing(ctx, service)
	if err != nil {
		return nil, err
	}
	ef.tracer = tp
	return stop, nil
}
