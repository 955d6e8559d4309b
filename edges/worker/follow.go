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
// whose workers start after the edge become callable, and Refresh on each
// worker server reg holds, so a manifest that changed on its workers (an
// MCP server's tool list) replaces the registered one (Registry.Replace).
// Until then, workers refuse, unrun, calls naming the old manifest.
// Discovery errors are logged and retried.
func Follow(ctx context.Context, nc *nats.Conn, reg *tools.Registry, every time.Duration, opts ...Option) {
	o := newOptions(opts)
	if every <= 0 {
		every = DefaultFollowEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	known := map[string]*Remote{} // the worker servers reg holds, kept if they come to list no tools
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
		refresh(ctx, reg, known, o)
	}
}

// refresh takes the changed manifests of the worker servers reg holds.
func refresh(ctx context.Context, reg *tools.Registry, known map[string]*Remote, o remoteOptions) {
	for _, in := range reg.Servers() {
		if in.Origin != tools.OriginWorker || known[in.ServerID] != nil || in.Manifest == nil {
			continue
		}
		for _, t := range in.Manifest.Tools {
			if e, ok := reg.Tool(in.ServerID, t.Name); ok {
				if r, ok := e.Server.(*Remote); ok {
					known[in.ServerID] = r
				}
				break
			}
		}
	}
	for id, r := range known {
		old, oldHash, _ := r.snapshot()
		changed, err := r.Refresh(ctx)
		switch {
		case errors.Is(err, nats.ErrNoResponders):
			o.log.Debug("worker: no worker serves the server now", "server", id)
			continue
		case err != nil:
			o.log.Warn("worker: manifest not refreshed", "server", id, "err", err)
			continue
		case !changed:
			continue
		}
		if err := reg.Replace(r); err != nil {
			// The calls keep naming the manifest the registry holds.
			r.set(old, oldHash)
			o.log.Warn("worker: changed manifest not taken", "server", id, "err", err)
			continue
		}
		o.log.Info("worker: tool server's manifest changed", "server", id, "tools", r.ToolNames(), "manifest_sha256", r.ManifestSHA256())
	}
}
