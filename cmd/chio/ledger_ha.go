package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/lease"
)

// haFlags make `chio ledger` one of several active/standby instances.
type haFlags struct {
	enabled  bool
	instance string
	ttl      time.Duration
}

func (f *haFlags) register(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.enabled, "standby", false, "run as one of several ledger instances: the holder of the writer lease (JetStream KV "+lease.DefaultBucket+") appends, the others follow the stream into their own stores and take over when it lapses")
	cmd.Flags().StringVar(&f.instance, "instance", "", "this instance's id in the writer lease (default HOSTNAME-PID)")
	cmd.Flags().DurationVar(&f.ttl, "lease-ttl", 5*time.Second, "writer lease TTL: a dead writer is replaced after about this long and a cut-off one stops appending after half of it")
}

// id is this instance's id in the writer lease.
func (f *haFlags) id() string {
	if f.instance != "" {
		return f.instance
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

// leaseBucket opens the writer lease's bucket, waiting while JetStream is
// not ready; nil once ctx ends.
func leaseBucket(ctx context.Context, js jetstream.JetStream, replicas int, log *slog.Logger) jetstream.KeyValue {
	for {
		kv, err := lease.Bucket(ctx, js, lease.DefaultBucket, replicas)
		if err == nil {
			return kv
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Warn("ledger: lease bucket not ready; retrying", "err", err)
		if !sleepCtx(ctx, time.Second) {
			return nil
		}
	}
}

// withStandby makes runLedger one of several instances behind the writer
// lease instead of the only writer.
func withStandby(ha *haFlags) runOption { return func(c *runConfig) { c.ha = ha } }

// fence is the writer check a ledger asks before each commit: the current
// term's, or a refusal while this instance holds none.
type fence struct{ term atomic.Pointer[lease.Term] }

func (f *fence) check() error {
	t := f.term.Load()
	if t == nil {
		return fmt.Errorf("%w: this instance holds no writer lease", lease.ErrLost)
	}
	return t.Valid()
}

// standby runs l as one of several instances behind a writer lease. While
// another instance writes, it follows the stream into its own store (so a
// takeover starts warm and the log is the same leaf for leaf); once it holds
// the lease it runs as the writer, fenced by the lease, until ctx ends or the
// lease is lost, and then stands by again. writer, if set, shows the role.
func standby(ctx context.Context, kv jetstream.KeyValue, l *ledger.Ledger, f *fence, ha *haFlags, writer prometheus.Gauge, log *slog.Logger) error {
	id := ha.id()
	ls, err := lease.New(kv, id, lease.WithTTL(ha.ttl), lease.WithLogger(log))
	if err != nil {
		return usageError(err)
	}
	for {
		fctx, stopFollow := context.WithCancel(ctx)
		// A follower that fails for good stops the wait for the lease too:
		// a standby whose store cannot follow must say so now, not when it
		// is needed.
		actx, stopAcquire := context.WithCancel(ctx)
		followed := make(chan error, 1)
		go func() {
			for {
				err := l.Follow(fctx)
				if err == nil || fctx.Err() != nil || !transient(err) {
					if err != nil {
						stopAcquire()
					}
					followed <- err
					return
				}
				log.Warn("ledger: following the stream failed; retrying", "err", err)
				sleepCtx(fctx, time.Second)
			}
		}()
		term, err := ls.Acquire(actx)
		stopFollow()
		ferr := <-followed
		stopAcquire()
		if ferr != nil {
			if term != nil {
				_ = term.Release(context.WithoutCancel(ctx))
			}
			return ferr
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("ledger: acquire the writer lease: %w", err)
		}
		f.term.Store(term)
		if writer != nil {
			writer.Set(1)
		}
		log.Info("ledger: this instance is the writer", "instance", id, "epoch", term.Epoch())
		rctx, cancel := context.WithCancel(term.Context())
		asked := make(chan time.Time, 1) // when the process was told to stop
		stopWithParent := context.AfterFunc(ctx, func() { asked <- time.Now(); cancel() })
		runErr := l.Run(rctx)
		stopWithParent()
		cancel()
		var stopAsked, runStopped time.Time
		select {
		case stopAsked = <-asked:
			runStopped = time.Now()
		default:
		}
		lost := term.Valid()
		f.term.Store(nil)
		if writer != nil {
			writer.Set(0)
		}
		rel, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if err := term.Release(rel); err != nil {
			log.Warn("ledger: release the writer lease", "err", err)
		} else if !stopAsked.IsZero() {
			// How long a standby waited for the hand-over, and where.
			log.Info("ledger: stopped appending and released the writer lease", "instance", id, "epoch", term.Epoch(),
				"appending_stopped_after", runStopped.Sub(stopAsked).Round(time.Millisecond), "released_after", time.Since(stopAsked).Round(time.Millisecond))
		}
		relCancel()
		switch {
		case ctx.Err() != nil:
			return runErr
		case runErr != nil && !errors.Is(runErr, lease.ErrLost) && !transient(runErr):
			return runErr // storage failure: a supervisor restarts the process
		case lost != nil || errors.Is(runErr, lease.ErrLost):
			log.Warn("ledger: lost the writer lease; standing by", "instance", id, "epoch", term.Epoch(), "err", errors.Join(lost, runErr))
		case transient(runErr):
			// NATS is electing leaders (a node was lost): hand the lease
			// back and contend again rather than exit.
			log.Warn("ledger: JetStream did not answer; standing by", "instance", id, "epoch", term.Epoch(), "err", runErr)
			sleepCtx(ctx, time.Second)
		case runErr != nil:
			return runErr
		default:
			return nil
		}
	}
}

// transient reports whether err is JetStream not answering in time, or
// answering 503 "temporarily unavailable" (err_code 10008), which a
// cluster that is electing leaders does for a few seconds.
func transient(err error) bool {
	var apiErr *jetstream.APIError
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		(errors.As(err, &apiErr) && apiErr.Code == 503)
}

// sleepCtx pauses for d; false means ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool { return backoff.Sleep(ctx, d) == nil }
