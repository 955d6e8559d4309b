package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/edges/tools"
)

// DefaultFollowEvery is how often Follow looks for new tool servers.
const DefaultFollowEvery = 10 * time.Second

// Register discovers the tool servers workers serve on nc and registers a
// Remote for each on reg, skipping (and returning in skipped) those whose
// id reg already holds. A server reg refuses is logged and skipped, so
// one bad worker does not keep the others out. It returns the Remotes it
// registered; err is a failed discovery only.
func Register(ctx context.Context, nc *nats.Conn, reg *tools.Registry, opts ...Option) (added []*Remote, skipped []string, err error) {
	o := newOptions(opts)
	remotes, err := Discover(ctx, nc, opts...)
	if err != nil {
		return nil, nil, err
	}
	held := map[string]bool{}
	for _, in := range reg.Servers() {
		held[in.ServerID] = true
	}
	for _, r := range remotes {
		if held[r.ServerID()] {
			skipped = append(skipped, r.ServerID())
			continue
		}
		if err := reg.Register(r); err != nil {
			o.log.Warn("worker: tool server not registered", "server", r.ServerID(), "err", err)
			skipped = append(skipped, r.ServerID())
			continue
		}
		added = append(added, r)
	}
	return added, skipped, nil
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
