package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/edges/tools"
)

// DefaultFollowEvery is how often Follow looks for new tool servers.
const DefaultFollowEvery = 10 * time.Second

// Register discovers the tool servers workers serve on nc and registers a
// Remote for each on reg, skipping (and returning in skipped) those whose
// id reg already holds. It returns the Remotes it registered.
func Register(ctx context.Context, nc *nats.Conn, reg *tools.Registry, opts ...Option) (added []*Remote, skipped []string, err error) {
	remotes, err := Discover(ctx, nc, opts...)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range remotes {
		if registered(reg, r) {
			skipped = append(skipped, r.ServerID())
			continue
		}
		if err := reg.Register(r); err != nil {
			return added, skipped, fmt.Errorf("register worker server %q: %w", r.ServerID(), err)
		}
		added = append(added, r)
	}
	return added, skipped, nil
}

// registered reports whether reg holds a server of r's id (one of its
// tools).
func registered(reg *tools.Registry, r *Remote) bool {
	for _, name := range r.ToolNames() {
		if _, ok := reg.Tool(r.ServerID(), name); ok {
			return true
		}
	}
	return false
}

// Follow runs Register every interval until ctx ends, so tool servers
// whose workers start after the edge become callable. A server already
// registered keeps the manifest it was registered with: replicas serving
// another one refuse its calls unrun, and the edge must be restarted to
// take it. Discovery errors are logged and retried.
func Follow(ctx context.Context, nc *nats.Conn, reg *tools.Registry, every time.Duration, opts ...Option) {
	o := newOptions(opts)
	if every <= 0 {
		every = DefaultFollowEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		added, _, err := Register(ctx, nc, reg, opts...)
		if err != nil && !errors.Is(err, context.Canceled) {
			o.log.Warn("worker: discovery failed; retrying", "err", err)
		}
		for _, r := range added {
			o.log.Info("worker: tool server discovered", "server", r.ServerID(), "tools", r.ToolNames(), "manifest_sha256", r.ManifestSHA256())
		}
	}
}
