package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/transparency-dev/tessera"
	"github.com/transparency-dev/tessera/storage/posix"
	badger_as "github.com/transparency-dev/tessera/storage/posix/antispam"
	"golang.org/x/mod/sumdb/note"
)

// tesseraConfig is how Tessera is tuned: its documented throughput knobs.
type tesseraConfig struct {
	batchSize          uint          // WithBatching size
	batchAge           time.Duration // WithBatching age
	checkpointInterval time.Duration // WithCheckpointInterval (POSIX minimum 100ms)
}

// watchPeriod is how often the checkpoint file is read to see which
// entries a published checkpoint covers: Tessera's PublicationAwaiter does
// the same, but wakes every waiter on each poll; one watcher noting the
// time each size first appears costs less and is as precise.
const watchPeriod = time.Millisecond

// runTessera appends entries (their first n) to a fresh Tessera POSIX log
// in dir under shape, with the persistent (Badger) antispam or without.
func runTessera(ctx context.Context, dir string, entries [][]byte, n int, antispam bool, shape loadShape, cfg tesseraConfig) (runResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	skey, vkey, err := note.GenerateKey(rand.Reader, "bench.local/tessera")
	if err != nil {
		return runResult{}, fmt.Errorf("checkpoint key: %w", err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)

	driver, err := posix.New(ctx, posix.Config{Path: filepath.Join(dir, "log")})
	if err != nil {
		return runResult{}, fmt.Errorf("tessera posix: %w", err)
	}
	opts := tessera.NewAppendOptions().
		WithCheckpointSigner(signer).
		WithBatching(cfg.batchSize, cfg.batchAge).
		WithCheckpointInterval(cfg.checkpointInterval)
	if antispam {
		// Badger has no Close in this API: its goroutines end with ctx.
		as, err := quietBadger(func() (*badger_as.AntispamStorage, error) {
			return badger_as.NewAntispam(ctx, filepath.Join(dir, "antispam"), badger_as.AntispamOpts{})
		})
		if err != nil {
			return runResult{}, fmt.Errorf("tessera antispam: %w", err)
		}
		opts = opts.WithAntispam(tessera.DefaultAntispamInMemorySize, as)
	}
	appender, shutdown, reader, err := tessera.NewAppender(ctx, driver, opts)
	if err != nil {
		return runResult{}, fmt.Errorf("tessera appender: %w", err)
	}

	win := make(window, shape.window)
	var (
		mu   sync.Mutex
		cps  []covered
		done = make(chan struct{})
	)
	watchErr := make(chan error, 1)
	go func() {
		var seen uint64
		t := time.NewTicker(watchPeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				watchErr <- nil
				return
			case <-t.C:
			}
			raw, err := reader.ReadCheckpoint(ctx)
			if err != nil {
				continue // not published yet, or caught mid-rename
			}
			at := time.Now()
			size, err := parseCheckpointSize(raw)
			if err != nil || size <= seen {
				continue
			}
			mu.Lock()
			cps = append(cps, covered{size: size, at: at})
			mu.Unlock()
			win.release(int(size - seen))
			prev := seen
			seen = size
			if prev < uint64(n) && size >= uint64(n) {
				close(done)
			}
		}
	}()

	t0 := make([]time.Time, n)
	idx := make([]uint64, n)
	var (
		resolvers sync.WaitGroup
		pushbacks atomic.Int64
		failed    atomic.Value
	)
	submit := func(i int, due time.Time) error {
		t0[i] = submitTime(due)
		f := appender.Add(ctx, tessera.NewEntry(entries[i]))
		// The future resolves once the entry is sequenced and in the tree;
		// the checkpoint covering it comes later and is seen by the watcher.
		resolvers.Go(func() {
			for {
				x, err := f()
				if errors.Is(err, tessera.ErrPushback) {
					// Antispam's follower is behind: back off and retry, as a
					// personality's client would.
					pushbacks.Add(1)
					time.Sleep(10 * time.Millisecond)
					f = appender.Add(ctx, tessera.NewEntry(entries[i]))
					continue
				}
				if err == nil && x.IsDup {
					err = fmt.Errorf("entry %d reported as a duplicate of %d", i, x.Index)
				}
				if err != nil {
					failed.CompareAndSwap(nil, err)
					cancel()
					return
				}
				idx[i] = x.Index
				return
			}
		})
		return nil
	}
	if err := drive(ctx, n, shape, win, submit); err != nil {
		if e, ok := failed.Load().(error); ok {
			return runResult{}, fmt.Errorf("tessera add: %w", e)
		}
		return runResult{}, err
	}
	select {
	case <-done:
	case <-ctx.Done():
		if e, ok := failed.Load().(error); ok {
			return runResult{}, fmt.Errorf("tessera add: %w", e)
		}
		return runResult{}, ctx.Err()
	}
	resolvers.Wait()
	if e, ok := failed.Load().(error); ok {
		return runResult{}, fmt.Errorf("tessera add: %w", e)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Minute)
	defer scancel()
	if err := shutdown(sctx); err != nil {
		return runResult{}, fmt.Errorf("tessera shutdown: %w", err)
	}
	cancel()
	<-watchErr

	raw, err := reader.ReadCheckpoint(context.Background())
	if err != nil {
		return runResult{}, fmt.Errorf("read tessera checkpoint: %w", err)
	}
	size, err := checkpointSize(raw, verifier)
	if err != nil {
		return runResult{}, fmt.Errorf("tessera checkpoint: %w", err)
	}
	if size != uint64(n) {
		return runResult{}, fmt.Errorf("tessera checkpoint commits to %d entries, want %d", size, n)
	}
	res := runResult{n: n, first: t0[0], lat: make(Latencies, 0, n), checkpoints: len(cps)}
	seen := make([]bool, n)
	for i := range n {
		if idx[i] >= uint64(n) || seen[idx[i]] {
			return runResult{}, fmt.Errorf("tessera index %d of entry %d out of range or given twice", idx[i], i)
		}
		seen[idx[i]] = true
		at, ok := coveredAt(cps, idx[i])
		if !ok {
			return runResult{}, fmt.Errorf("tessera entry %d (index %d): no checkpoint seen covering it", i, idx[i])
		}
		res.lat = append(res.lat, at.Sub(t0[i]))
		res.first = minTime(res.first, t0[i])
		res.last = maxTime(res.last, at)
	}
	res.note = fmt.Sprintf("%d checkpoints seen", len(cps))
	if antispam {
		res.note += fmt.Sprintf(", %d antispam pushbacks", pushbacks.Load())
	}
	return res, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// quietBadger runs open with os.Stderr on /dev/null: Badger's default
// logger (the antispam API offers no options) captures os.Stderr when it is
// created and prints INFO lines. Sections run one at a time, so nothing
// else is writing to stderr meanwhile.
func quietBadger(open func() (*badger_as.AntispamStorage, error)) (*badger_as.AntispamStorage, error) {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return open()
	}
	defer null.Close()
	stderr := os.Stderr
	os.Stderr = null
	defer func() { os.Stderr = stderr }()
	return open()
}
