package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// A section is one part of the run: it measures and returns its figures.
type section struct {
	key, title string
	run        func(ctx context.Context, env *Env) (*Section, error)
}

// sections lists the run's parts in the order they run: the ceilings
// first, so that every later figure can be read against them.
func sections() []section {
	return []section{
		{"limits", "1. Physical limits on this machine", runLimits},
		{"ledger", "2. Ledger vs Tessera (POSIX)", runLedgerVsTessera},
		{"edge", "3. A2A edge vs the a2a-go v2 server", runEdgeVsA2AGo},
		{"proofs", "4. Proof serving as the log grows", runProofs},
		{"scaleout", "5. Scale-out: one edge replica vs two", runScaleOut},
		{"evidence", "6. Evidence packages: export and verify as N grows", runEvidence},
		{"workers", "7. Tools on workers (NATS services) vs in process", runWorkers},
		{"tracing", "8. Tracing: chio up CPU per call with OpenTelemetry off and on", runTracing},
		{"capacity", "9. Capacity: disk per receipt and RSS of chio up under a fixed load", runCapacity},
	}
}

// Env is what a section is given.
type Env struct {
	// Short asks for a run of a few seconds that exercises every code path
	// with small sizes; its figures mean nothing.
	Short bool
	// Rounds is how many times side-by-side measurements alternate A/B.
	Rounds int
	// Dir is the section's own scratch directory, removed after it.
	Dir string
	// Repo is the main module's root (to build chio, run scripts/…).
	Repo string
	// Progress receives a line now and then on long steps.
	Progress io.Writer
	// DPoP makes our edge's load present a delegating capability with a
	// fresh RFC 9449 proof per request instead of the dev capability as a
	// bearer token: the cost of holder binding.
	DPoP bool

	mu     sync.Mutex
	builds map[string]string
	binDir string
}

// Logf writes a progress line.
func (e *Env) Logf(format string, args ...any) {
	fmt.Fprintf(e.Progress, "  "+format+"\n", args...)
}

// Build compiles the package pkg of the module in moduleDir (relative to
// the repository root: "." for chio itself, "scripts/bench" for this
// module's commands) into a binary named name, once per run, and returns
// its path. Binaries are built without the race detector or debugging
// aids, as they would ship.
func (e *Env) Build(ctx context.Context, moduleDir, pkg, name string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	key := moduleDir + "|" + pkg
	if p, ok := e.builds[key]; ok {
		return p, nil
	}
	if err := os.MkdirAll(e.binDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(e.binDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = filepath.Join(e.Repo, moduleDir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s in %s: %w\n%s", pkg, moduleDir, err, b)
	}
	e.builds[key] = out
	return out, nil
}

// Chio builds the chio command.
func (e *Env) Chio(ctx context.Context) (string, error) {
	return e.Build(ctx, ".", "./cmd/chio", "chio")
}

// pick returns short in a short run and full otherwise.
func pick[T any](e *Env, short, full T) T {
	if e.Short {
		return short
	}
	return full
}

// Section is one section's outcome: how it measured, the figures, and what
// they say (targets met or missed, and what bounds each figure).
type Section struct {
	Key      string
	Title    string
	Settings []string
	Tables   []Table
	Findings []string
	Elapsed  time.Duration
}

// Table is one table of figures; cells are already formatted.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}
