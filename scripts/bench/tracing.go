package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/chio-ledger/chio/internal/otlptest"
)

// Section 8: what OpenTelemetry tracing costs. Two `chio up` processes,
// one with no OTEL_* variable (tracing off: no provider, nothing built on
// the hot paths) and one exporting every call's trace over OTLP/gRPC to a
// receiver in this process, take the same closed-loop A2A load in turn;
// the figure that matters is the server's CPU per call.

// tracingVars are the OTEL_* variables the section sets: cleared for the
// off side, so that the harness's own environment cannot switch it on.
var tracingVars = []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
	"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
	"OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SERVICE_NAME", "OTEL_BSP_SCHEDULE_DELAY"}

func runTracing(ctx context.Context, env *Env) (*Section, error) {
	bin, err := env.Chio(ctx)
	if err != nil {
		return nil, err
	}
	rcv, err := otlptest.Listen()
	if err != nil {
		return nil, err
	}
	defer rcv.Close()
	offVars := make([]string, 0, len(tracingVars)+4)
	for _, k := range tracingVars {
		offVars = append(offVars, k+"=")
	}
	const bspDelay = 100 * time.Millisecond
	onVars := append(append([]string(nil), offVars...), "OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.Endpoint(),
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc", "OTEL_SERVICE_NAME=chio-bench",
		fmt.Sprintf("OTEL_BSP_SCHEDULE_DELAY=%d", bspDelay.Milliseconds()))

	type side struct {
		name   string
		up     *chioUp
		logged int
		levels []edgeSide
	}
	levels := pick(env, []int{4}, []int{1, 16})
	sides := []*side{{name: "off"}, {name: "on"}}
	for i, vars := range [][]string{offVars, onVars} {
		s := sides[i]
		if s.up, err = startChioUpAs(ctx, env, bin, "chio-up-tracing-"+s.name, vars); err != nil {
			return nil, err
		}
		defer s.up.stop()
		if err := waitHTTP(ctx, s.up.base+"/log/checkpoint", 60*time.Second); err != nil {
			return nil, err
		}
		if s.logged, err = logSize(ctx, s.up.base); err != nil {
			return nil, err
		}
		s.levels = make([]edgeSide, len(levels))
	}
	warm := pick(env, 100*time.Millisecond, 2*time.Second)
	dur := pick(env, 300*time.Millisecond, 8*time.Second)
	drainLimit := pick(env, 30*time.Second, 3*time.Minute)
	// After a run's receipts are signed the harness waits a few of the
	// span exporter's batch intervals, so that the last spans of the run
	// are exported (and their CPU charged) before the CPU is read; the
	// off side waits as long.
	settle := 5 * bspDelay
	spans, tracedCalls := 0, 0

	run := func(s *side, i, conc int) error {
		pid := s.up.cmd.Process.Pid
		c0 := cpuTime(pid)
		res, err := closedLoop(ctx, s.up.target, conc, warm, dur)
		if err != nil {
			return err
		}
		s.logged += res.OK
		if _, err := waitLogSize(ctx, s.up.base, s.logged, drainLimit); err != nil {
			return fmt.Errorf("tracing %s: receipts of the run at concurrency %d: %w\n%s", s.name, conc, err, s.up.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(settle):
		}
		if err := s.up.alive(); err != nil {
			return err
		}
		lv := &s.levels[i]
		lv.runs = append(lv.runs, res)
		lv.cpu += cpuTime(pid) - c0
		lv.ok += res.OK
		// Every span comes from the on side (the off side has no
		// exporter); a few of a run's may arrive during the next one.
		n := rcv.Reset()
		spans += n
		if s.name == "on" {
			tracedCalls += res.OK
		}
		env.Logf("tracing: %-3s c=%-3d %8s  CPU/call %s  errors %d  spans %d", s.name, conc, fmtRate(res.Rate()), fmtCPU(cpuTime(pid)-c0, res.OK), res.Errors, n)
		return nil
	}
	for i, conc := range levels {
		for r := range env.Rounds {
			first, second := sides[0], sides[1]
			if r%2 == 1 {
				first, second = second, first
			}
			if err := run(first, i, conc); err != nil {
				return nil, err
			}
			if err := run(second, i, conc); err != nil {
				return nil, err
			}
		}
	}

	sec := &Section{
		Settings: []string{
			fmt.Sprintf("Machine: %d logical CPUs, shared by the load generator, both servers and the OTLP receiver.", runtime.NumCPU()),
			"Two `chio up --listen 127.0.0.1:0 --nats-listen none` processes with fresh data directories, running at once and loaded in turn: \"off\" with every OTEL_* variable empty (tracing off: no tracer provider, no exporter, no trace headers, no receipt trace_id), \"on\" with OTEL_EXPORTER_OTLP_ENDPOINT at an OTLP/gRPC receiver in the harness (internal/otlptest; its CPU is the harness's, not charged to chio), OTEL_EXPORTER_OTLP_PROTOCOL=grpc, the default sampler (parentbased_always_on: every call traced) and OTEL_BSP_SCHEDULE_DELAY=" + fmt.Sprint(bspDelay.Milliseconds()) + " ms.",
			"Request: A2A 1.0 JSON-RPC `SendMessage`, as in section 3, with the dev capability as a bearer token; every guard on.",
			fmt.Sprintf("Closed loop: %v workers; %s warm-up, then %s measured; %d A/B rounds per level, alternating which side goes first. After each run the harness waits until the ledger has signed every receipt of the run, then %s more for the span exporter, and only then reads the server's CPU (user+system, /proc): CPU per call includes the ledger, the projections and, on, the export of the call's spans.", levels, warm, dur, env.Rounds, settle),
		},
	}
	t := Table{
		Caption: "chio up CPU per call with tracing off and on (every call traced and exported)",
		Header:  []string{"concurrency", "off req/s", "on req/s", "off CPU/call", "on CPU/call", "added CPU/call", "added"},
	}
	for i, conc := range levels {
		off, on := &sides[0].levels[i], &sides[1].levels[i]
		added, pct := "n/a", "n/a"
		if off.ok > 0 && on.ok > 0 && off.cpu > 0 && on.cpu > 0 {
			a, b := off.cpu/time.Duration(off.ok), on.cpu/time.Duration(on.ok)
			added = fmtDur(b - a)
			pct = fmt.Sprintf("%+.0f%%", 100*(float64(b)/float64(a)-1))
		}
		t.Rows = append(t.Rows, []string{fmt.Sprint(conc), off.rateCell(), on.rateCell(),
			fmtCPU(off.cpu, off.ok), fmtCPU(on.cpu, on.ok), added, pct})
	}
	sec.Tables = []Table{t}
	if tracedCalls > 0 {
		sec.Findings = append(sec.Findings, fmt.Sprintf("Spans exported per call: %.1f (the edge's HTTP server span, dispatch, kernel decide and one per guard, the two event publishes, the tool, the finish, the ledger's process/sign/append and the receipt's republication, the projections' process spans; a few are the harness's own polls of /log/checkpoint).", float64(spans)/float64(tracedCalls)))
	}
	sec.Findings = append(sec.Findings,
		"Off is the default: with no OTEL_* variable chio builds no provider, and every component checks a nil tracer once per call before doing any span work.",
		"To trace less, sample: OTEL_TRACES_SAMPLER=parentbased_traceidratio with OTEL_TRACES_SAMPLER_ARG=0.1 records one call in ten (an unsampled call's spans are not recorded and its receipt carries no trace_id).")
	return sec, nil
}
