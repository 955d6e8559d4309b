// Command bench measures Chio ledger side by side with the tools its users
// know, in one run on one machine, and writes the figures to RESULTS.md:
//
//	go run -C scripts/bench .                 # the full run (tens of minutes)
//	go run -C scripts/bench . -only ledger    # one section (limits, ledger, edge, proofs, scaleout, evidence, workers, tracing, capacity)
//	go run -C scripts/bench . -short          # seconds; what CI runs, through go test -short
//
// Sections:
//  1. limits: the physical ceilings (Ed25519, SHA-256, Pebble synced
//     commits, JetStream SyncAlways publishes).
//  2. ledger: our ledger ingesting receipts from JetStream against Tessera's
//     POSIX log appending the same entries, alternating A/B.
//  3. edge: our A2A edge (governance, durable receipts) against the a2a-go
//     v2 server with an echo executor, one load generator.
//  4. proofs: inclusion proofs over HTTP as the log grows to 10⁷ leaves.
//  5. scaleout: one edge replica against two behind the proxy on the local
//     cluster (scripts/cluster.sh).
//  6. evidence: an evidence package of every receipt exported from the
//     ledger's HTTP API and verified offline (ledger/evidence) at two log
//     sizes: rate, time, peak memory (flat in N) and bytes per receipt.
//  7. workers: the demo tool in process against the same tool on chio
//     worker processes (chio up --workers), one worker and two.
//  8. tracing: chio up's CPU per call with OpenTelemetry tracing off
//     (the default) and on, exporting every call's spans over OTLP.
//  9. capacity: chio up under a fixed load for N calls
//     ($CHIO_BENCH_CAPACITY_CALLS, default 100000): bytes on disk per
//     receipt in each store and RSS over time.
//
// It is its own module so that the peers (Tessera and its dependencies)
// never enter the main module's go.mod.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	var o options
	flag.BoolVar(&o.short, "short", false, "a few seconds per section: checks the harness, not the machine")
	flag.StringVar(&o.only, "only", "", "comma-separated sections to run (default: all): "+strings.Join(sectionKeys(), ","))
	flag.StringVar(&o.out, "out", "", "write the results as Markdown here (default: RESULTS.md beside this file for a full run of all sections, nowhere otherwise)")
	flag.StringVar(&o.dir, "dir", "", "scratch directory (default: a temporary one, removed afterwards); put it on the disk you want measured")
	flag.IntVar(&o.rounds, "rounds", 3, "A/B alternations for the side-by-side sections")
	flag.BoolVar(&o.dpop, "dpop", false, "edge section: our load presents a delegating capability with a DPoP proof per request (holder binding) instead of the dev capability as a bearer token")
	flag.Parse()
	if o.out == "" && !o.short && o.only == "" {
		o.out = "RESULTS.md"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type options struct {
	short  bool
	only   string
	out    string
	dir    string
	rounds int
	dpop   bool
}

// run runs the chosen sections in order, printing each one's tables as it
// ends, and writes the Markdown report if asked. A section that fails ends
// the run: a table with a hole in it would read as a result.
func run(ctx context.Context, o options, w *os.File) error {
	chosen, err := choose(o.only)
	if err != nil {
		return err
	}
	root := o.dir
	if root == "" {
		d, err := os.MkdirTemp("", "chio-bench-")
		if err != nil {
			return fmt.Errorf("scratch directory: %w", err)
		}
		defer os.RemoveAll(d)
		root = d
	}
	repo, err := repoRoot()
	if err != nil {
		return err
	}
	env := &Env{Short: o.short, DPoP: o.dpop, Rounds: max(o.rounds, 1), Repo: repo, Progress: w, builds: map[string]string{}, binDir: filepath.Join(root, "bin")}
	rep := &Report{Started: time.Now(), Short: o.short, Command: strings.Join(append([]string{"go run -C scripts/bench ."}, os.Args[1:]...), " ")}
	rep.Machine = describeMachine(ctx, root)
	rep.Commit = chioCommit(ctx, repo)
	fmt.Fprint(w, rep.Machine.Text())
	for _, s := range chosen {
		env.Dir = filepath.Join(root, s.key)
		if err := os.MkdirAll(env.Dir, 0o755); err != nil {
			return err
		}
		fmt.Fprintf(w, "\n== %s\n", s.title)
		began := time.Now()
		sec, err := s.run(ctx, env)
		if err != nil {
			return fmt.Errorf("section %s: %w", s.key, err)
		}
		sec.Key, sec.Elapsed = s.key, time.Since(began)
		if sec.Title == "" {
			sec.Title = s.title
		}
		rep.Sections = append(rep.Sections, sec)
		fmt.Fprint(w, sec.Text())
		_ = os.RemoveAll(env.Dir) // sections can be large (the proofs log)
	}
	rep.Versions = moduleVersions()
	if o.out != "" {
		if err := os.WriteFile(o.out, []byte(rep.Markdown()), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", o.out, err)
		}
		fmt.Fprintf(w, "\nwrote %s\n", o.out)
	}
	return nil
}

func choose(only string) ([]section, error) {
	all := sections()
	if only == "" {
		return all, nil
	}
	var out []section
	for _, k := range strings.Split(only, ",") {
		i := slices.IndexFunc(all, func(s section) bool { return s.key == strings.TrimSpace(k) })
		if i < 0 {
			return nil, fmt.Errorf("-only: unknown section %q (one of %s)", k, strings.Join(sectionKeys(), ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

func sectionKeys() []string {
	var keys []string
	for _, s := range sections() {
		keys = append(keys, s.key)
	}
	return keys
}

// repoRoot finds the main module's root: the bench module lives two
// levels below it, and the run may start from either.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.HasPrefix(string(b), "module github.com/chio-ledger/chio\n") {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no github.com/chio-ledger/chio module above %s", wd)
		}
	}
}
