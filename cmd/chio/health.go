package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/health"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// runConfig is what runLedger serves besides the ledger, in chio up.
type runConfig struct {
	reg          *prometheus.Registry
	checks       []health.Check
	drains       []func(context.Context) error
	drainTimeout time.Duration
	ha           *haFlags // set: one of several active/standby instances
	auth         *readauth.Authenticator
}

// withReadAuth sets who may read the log's private half; without it only
// the public half (checkpoints, hash tiles, consistency proofs) is served.
func withReadAuth(a *readauth.Authenticator) runOption { return func(c *runConfig) { c.auth = a } }

// runOption configures runLedger.
type runOption func(*runConfig)

// withRegistry serves reg at /metrics (shared with the other parts of the
// process) instead of a registry of the ledger's own.
func withRegistry(reg *prometheus.Registry) runOption { return func(c *runConfig) { c.reg = reg } }

// withChecks adds readiness checks to the ledger's own (nats, storage).
func withChecks(checks ...health.Check) runOption {
	return func(c *runConfig) { c.checks = append(c.checks, checks...) }
}

// withDrain bounds the graceful stop by timeout and runs drain alongside
// the HTTP server's shutdown.
func withDrain(timeout time.Duration, drain func(context.Context) error) runOption {
	return func(c *runConfig) { c.drainTimeout, c.drains = timeout, append(c.drains, drain) }
}

// logStorageCheck is the ledger's "storage" check: the log store takes
// writes (its filesystem has the reserve free, and no failed write awaits
// a reopen: otherwise integration is paused, and the check says why) and
// answers a read of its latest checkpoint (absent only before the ledger
// has initialised a new log, which is still a store that works).
func logStorageCheck(store *logstore.Store) health.Check {
	return health.Check{Name: "storage", Func: func(context.Context) error {
		if err := store.Err(); err != nil {
			return err
		}
		if err := store.Corrupt(); err != nil {
			return err
		}
		size, _ := store.Head()
		if _, err := store.Checkpoint(size); err != nil && !errors.Is(err, logstore.ErrNotFound) {
			return fmt.Errorf("read the checkpoint of size %d: %w", size, err)
		}
		return nil
	}}
}

// eventStoreCheck is chio up's "event_store" check: the embedded NATS
// server's store watchdog accepts writes (it refuses them while the
// JetStream store's filesystem is short of space, and says so).
func eventStoreCheck(ns *natsembed.Server) health.Check {
	return health.Check{Name: "event_store", Func: func(context.Context) error { return ns.StoreErr() }}
}

// projectionsCheck is the projections' readiness check beyond NATS: their
// store answers and, when done is given (chio up, where a failed
// projection does not stop the process), Run has not stopped; *runErr is
// read only once done is closed.
func projectionsCheck(name string, svc *projections.Service, done <-chan struct{}, runErr *error) health.Check {
	return health.Check{Name: name, Func: func(context.Context) error {
		select {
		case <-done:
			if *runErr != nil {
				return fmt.Errorf("projections stopped: %w", *runErr)
			}
			return errors.New("projections stopped")
		default:
		}
		return svc.CheckStorage()
	}}
}

// edgeChecks are an A2A edge replica's readiness checks beyond NATS: the
// streams and buckets every call needs, and a live revocation watch
// (without it the kernel denies every call).
func edgeChecks(js jetstream.JetStream, k *kernel.Kernel) []health.Check {
	return []health.Check{
		health.Streams("streams", js, schemas.EventsStream, taskstore.StreamName,
			"KV_"+schemas.RevocationsBucket, "KV_"+schemas.BudgetsBucket),
		{Name: "governance", Func: func(context.Context) error { return k.Ready() }},
	}
}
