package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/chio-ledger/chio/edges/a2a"
)

// grpcAuto is chio up's default --grpc-listen: the --listen host, one port
// up (127.0.0.1:8081 beside the default 127.0.0.1:8080; port 0 stays 0).
const grpcAuto = "auto"

// registerGRPC adds the gRPC binding's flags; def is --grpc-listen's
// default ("" is off).
func (f *edgeFlags) registerGRPC(cmd *cobra.Command, def, help string) {
	cmd.Flags().StringVar(&f.grpcListen, "grpc-listen", def, help)
	cmd.Flags().StringVar(&f.grpcPublicURL, "grpc-public-url", "", "host:port advertised in the card for gRPC (default: --public-url's host with the gRPC port, else the listen address)")
}

// grpcAddr is the address --grpc-listen asks for, "" for off; auto
// derives it from the HTTP listen address.
func (f *edgeFlags) grpcAddr(httpListen string) (string, error) {
	switch f.grpcListen {
	case "", "none":
		return "", nil
	case grpcAuto:
		host, port, err := net.SplitHostPort(httpListen)
		if err != nil {
			return "", usageError(fmt.Errorf("--grpc-listen auto: --listen %q: %w", httpListen, err))
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return "", usageError(fmt.Errorf("--grpc-listen auto: --listen %q: port must be a number", httpListen))
		}
		if p != 0 {
			p++
		}
		return net.JoinHostPort(host, strconv.Itoa(p)), nil
	}
	return f.grpcListen, nil
}

// listenGRPC opens the gRPC listener at addr ("" for none) and sets
// f.grpcURL, the address the card advertises. It is opened before the
// edge is built because the card is fixed then.
func (f *edgeFlags) listenGRPC(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--grpc-listen %s: %w", addr, err)
	}
	if f.grpcURL, err = f.advertisedGRPC(ln.Addr()); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// advertisedGRPC is --grpc-public-url; else --public-url's host with the
// listener's port; else the listener's address, or just its port when it
// listens on every interface (the card then names the host the client
// fetched it from).
func (f *edgeFlags) advertisedGRPC(addr net.Addr) (string, error) {
	if f.grpcPublicURL != "" {
		if _, _, err := net.SplitHostPort(f.grpcPublicURL); err != nil {
			return "", usageError(fmt.Errorf("--grpc-public-url must be host:port: %w", err))
		}
		return f.grpcPublicURL, nil
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "", err
	}
	if f.publicURL != "" {
		u, err := url.Parse(f.publicURL)
		if err != nil || u.Hostname() == "" {
			return "", usageError(fmt.Errorf("--public-url %q: no host for the gRPC interface; set --grpc-public-url", f.publicURL))
		}
		return net.JoinHostPort(u.Hostname(), port), nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ":" + port, nil
	}
	return addr.String(), nil
}

// serveGRPC serves e's gRPC binding on ln, behind the HTTP limits ctx
// carries. It returns the server's drain,
// to run alongside the HTTP server's (GracefulStop lets calls and streams
// finish, subscriptions ending as the edge drains; at the deadline what is
// left is cut), and stop, to defer for the paths that never drain.
func serveGRPC(ctx context.Context, e *a2a.Edge, ln net.Listener) (drain func(context.Context) error, stop func()) {
	// The HTTP servers' connection bounds, in gRPC's terms: a connection
	// must finish its handshake within the header timeout, and one with
	// no call for the idle timeout is sent GOAWAY (a client reconnects
	// when it next calls).
	opts := append(a2a.GRPCServerOptions(), grpc.ConnectionTimeout(defaultReadHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: defaultIdleTimeout}))
	opts = append(opts, httpLimitsFrom(ctx).grpcOptions()...) // --rate-limit-address
	srv := grpc.NewServer(append(opts, e.GRPCTracing()...)...)
	e.RegisterGRPC(srv)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			slog.Error("a2a: gRPC server stopped", "err", err)
		}
	}()
	return func(ctx context.Context) error {
		done := make(chan struct{})
		go func() { srv.GracefulStop(); close(done) }()
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			srv.Stop()
			<-done
			return fmt.Errorf("grpc shutdown: %w", ctx.Err())
		}
	}, srv.Stop
}
