// Command soak runs one `chio up` under a steady mixed load for a long
// time and watches it for what only time shows: memory, goroutines, open
// files or latency that grow without bound, calls that start failing, and
// receipts that go missing.
//
//	go run ./scripts/soak                          # one hour, 30 operations/s
//	go run ./scripts/soak -duration 10m -rate 20
//	go run ./scripts/soak -short                   # 20 s: checks the harness, what CI runs
//
// It builds chio from ./cmd/chio, starts `chio up` as a child with a fresh
// data directory and its own loopback ports (the conformance demo agent as
// the default A2A skill, a local httpbin behind the OpenAPI bridge so MCP
// has tools), and drives every surface chio up serves with the clients
// their users run:
//
//   - A2A (a2a-go v2 SDK, JSON-RPC): blocking sends, streaming sends,
//     cancels of running tasks and resubscribes to running tasks;
//   - OpenAI function calling (openai-go): tool listings and Chat
//     Completions tool calls run through /openai/v1/tool-calls;
//   - MCP (modelcontextprotocol/go-sdk, streamable HTTP): tools/call on a
//     long-lived session, and now and then a fresh session;
//   - ACP (coder/acp-go-sdk): initialize and _chio/tool/invoke on /acp.
//
// Every -every it samples the chio up process (RSS, goroutines, open
// files, bytes under its data directory) and the window's call latencies
// and errors, and writes a CSV row. At the end it stops the load, waits
// for the ledger, checks with the operator token that the log holds one
// receipt per governed call (and every receipt id a call was answered
// with), stops chio up with SIGTERM, and writes an SVG plot and a
// Markdown summary. It exits 1 when calls failed above -max-error-rate or
// a check failed.
//
// It lives in the main module: every client it uses is already there.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// options are the command line.
type options struct {
	duration     time.Duration
	every        time.Duration
	rate         float64
	maxInflight  int
	maxErrorRate float64
	short        bool
	out          string
	title        string
	dir          string
	chio         string
	keep         bool
	replot       string
	earlyCancel  bool
	readBurst    readBurst
	upArgs       string
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", time.Hour, "how long the load runs")
	flag.DurationVar(&o.every, "every", 15*time.Second, "sampling interval (one CSV row, one latency window)")
	flag.Float64Var(&o.rate, "rate", 30, "operations started per second, all surfaces together (an operation is one or two client calls)")
	flag.IntVar(&o.maxInflight, "max-inflight", 128, "operations in flight at most; an arrival beyond it is shed and counted")
	flag.Float64Var(&o.maxErrorRate, "max-error-rate", 0.001, "fail when more than this fraction of calls failed")
	flag.BoolVar(&o.short, "short", false, "20 s, sampled every 2 s: checks the harness, not chio (what CI runs)")
	flag.StringVar(&o.out, "out", "", "directory for soak.csv, soak.svg and soak.md (default: a new directory under the system's temporary directory)")
	flag.StringVar(&o.title, "title", "", "title of the plot and the summary (default: from the duration)")
	flag.StringVar(&o.dir, "dir", "", "scratch directory for chio up's data and binary (default: a temporary one, removed afterwards)")
	flag.StringVar(&o.chio, "chio", "", "a chio binary to run instead of building ./cmd/chio")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch directory (chio up's data and log)")
	flag.Var(&o.readBurst, "read-burst", "after the receipt check, READERSxROUNDS concurrent readers page through the whole log (limit=200) and the peak RSS is reported, e.g. 32x2")
	flag.StringVar(&o.upArgs, "up-args", "", "more flags for chio up, space-separated (e.g. \"--memory-limit 256MiB\")")
	flag.BoolVar(&o.earlyCancel, "early-cancel", false, "cancel long-running A2A tasks right after a returnImmediately send, racing their start, instead of once they are working")
	flag.StringVar(&o.replot, "replot", "", "draw soak.svg and soak.png again from this soak.csv into -out (default: its directory), and exit")
	flag.Parse()
	if o.short {
		if !flagSet("duration") {
			o.duration = 20 * time.Second
		}
		if !flagSet("every") {
			o.every = 2 * time.Second
		}
	}
	if o.title == "" {
		o.title = fmt.Sprintf("chio up soak, %s at %.0f operations/s", o.duration, o.rate)
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if o.replot != "" {
		if err := replot(o); err != nil {
			fmt.Fprintln(os.Stderr, "soak:", err)
			os.Exit(2)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		var fe *failure
		if errors.As(err, &fe) {
			os.Exit(1)
		}
		os.Exit(2)
	}
}

// failure is a soak that ran but found chio wanting (errors over the
// threshold, a receipt missing, an unclean stop): exit 1. Anything else
// (the harness could not start) is exit 2.
type failure struct{ problems []string }

func (f *failure) Error() string {
	return fmt.Sprintf("%d check(s) failed: %v", len(f.problems), f.problems)
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func replot(o options) error {
	samples, err := readCSV(o.replot)
	if err != nil {
		return err
	}
	out := o.out
	if out == "" {
		out = filepath.Dir(o.replot)
	}
	return writePlots(out, o.title, samples)
}
