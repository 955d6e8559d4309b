package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/projections"
)

// defaultMemoryLimit is what --memory-limit is unless set: chio up's
// RSS stays under it through the soak's mix, and within a tenth above it
// over a million calls. 256MiB holds too, but costs
// a fifth of the edge's rate at 64 concurrent callers, in collections
// (docs/operations.md, "Memory").
const defaultMemoryLimit = 512 << 20

// memoryFlags is --memory-limit, for the commands that hold a Pebble
// store: it sets the Go runtime's soft memory limit and sizes the stores'
// caches and memtables from it.
type memoryFlags struct{ limit string }

func (f *memoryFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.limit, "memory-limit", memoryLimitDefault(os.Getenv("GOMEMLIMIT")),
		"the process's memory bound (e.g. 256MiB, 1GiB): the Go runtime's soft limit, with the log store's "+
			"Pebble cache and memtables sized to 1/8 and 1/32 of it and the projections' to 1/16 and 1/64; 0 keeps the "+
			"runtime unlimited and the stores' fixed defaults (default: GOMEMLIMIT when the environment sets it, else 512MiB)")
}

// memoryLimitDefault is --memory-limit's default: the environment's
// GOMEMLIMIT when set (the runtime already holds it; "off" is none),
// else defaultMemoryLimit.
func memoryLimitDefault(env string) string {
	switch env {
	case "":
		return humanize.IBytes(defaultMemoryLimit)
	case "off":
		return "0"
	}
	return env
}

// memoryBudget is one process's split of its --memory-limit.
type memoryBudget struct {
	limit                 int64 // 0: no limit, the stores' defaults
	logCache, logMemTbl   int64
	projCache, projMemTbl int64
}

// Floors: below them Pebble spends more on flushes and misses than the
// memory is worth.
const (
	minCache    = 8 << 20
	minMemTable = 4 << 20
)

// budget parses --memory-limit and splits it. Pebble holds its cache and
// up to two memtables per store once warm: with both stores, 9/32 of the
// limit, the rest left to the Go heap (NATS, the edge, the ledger's
// batches) and the runtime.
func (f *memoryFlags) budget() (memoryBudget, error) {
	n, err := humanize.ParseBytes(f.limit)
	if err != nil {
		return memoryBudget{}, usageError(fmt.Errorf("--memory-limit %q: %w", f.limit, err))
	}
	if n == 0 {
		return memoryBudget{}, nil
	}
	if n < 64<<20 {
		return memoryBudget{}, usageError(fmt.Errorf("--memory-limit %s: below 64MiB, the least the parts need", humanize.IBytes(n)))
	}
	l := int64(n)
	return memoryBudget{limit: l,
		logCache: max(l/8, minCache), logMemTbl: max(l/32, minMemTable),
		projCache: max(l/16, minCache), projMemTbl: max(l/64, minMemTable)}, nil
}

// apply sets the runtime's soft limit (not without one: GOMEMLIMIT from
// the environment, or none, stays).
func (b memoryBudget) apply() {
	if b.limit > 0 {
		debug.SetMemoryLimit(b.limit)
	}
}

// logStore is the log store's share, as Open options.
func (b memoryBudget) logStore() []logstore.Option {
	if b.limit == 0 {
		return nil
	}
	return []logstore.Option{logstore.WithMemory(b.logCache, b.logMemTbl)}
}

// projectionStore is the projections store's share, as Open options.
func (b memoryBudget) projectionStore() []projections.Option {
	if b.limit == 0 {
		return nil
	}
	return []projections.Option{projections.WithStoreMemory(b.projCache, b.projMemTbl)}
}
