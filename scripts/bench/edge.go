package main

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Section 3: our A2A edge (chio up: capability check, guards, durable
// decision/outcome events, asynchronously signed receipts) against the
// bare a2a-go v2 server answering the same SendMessage with an echo, both
// as child processes driven by one load generator.

const completed = "TASK_STATE_COMPLETED"

// edgeSide is one server's runs at one concurrency level.
type edgeSide struct {
	runs []*LoadResult
	cpu  time.Duration // server CPU over the runs (ours: until its receipts are signed)
	ok   int           // successful requests over the runs, warm-up included
}

// rate is the median req/s over the rounds; ok is false when any round had
// errors (such a run is not a throughput).
func (s *edgeSide) rate() (float64, bool) {
	for _, r := range s.runs {
		if r.Errors > 0 {
			return 0, false
		}
	}
	if len(s.runs) == 0 {
		return 0, false
	}
	return median(s.runs, (*LoadResult).Rate), true
}

// lat pools the rounds' latencies.
func (s *edgeSide) lat() Latencies {
	var l Latencies
	for _, r := range s.runs {
		l = append(l, r.Lat...)
	}
	return l
}

func (s *edgeSide) errors() (n int, first string) {
	for _, r := range s.runs {
		n += r.Errors
		if first == "" {
			first = r.FirstError
		}
	}
	return n, first
}

// rateCell is the throughput, or the error count when there were errors.
func (s *edgeSide) rateCell() string {
	if v, ok := s.rate(); ok {
		return fmtRate(v)
	}
	n, _ := s.errors()
	return fmt.Sprintf("%d errors", n)
}

func (s *edgeSide) latCell() string {
	l := s.lat()
	if len(l) == 0 {
		return "n/a"
	}
	return fmtDur(l.Pct(0.50)) + " / " + fmtDur(l.Pct(0.99))
}

// chioUp is a running `chio up`.
type chioUp struct {
	*child
	base   string // http://host:port
	target *Target
}

var chioUpReady = regexp.MustCompile(`chio up: JSON-RPC\s+(http://\S+)/a2a(?s:.*)chio up: dev capability in (\S+)`)

// startChioUp starts `chio up` as shipped, with a fresh data directory and
// the in-process NATS connection only (no TCP listener: nothing else needs
// it, and its port could clash with the cluster's).
func startChioUp(ctx context.Context, env *Env, bin string) (*chioUp, error) {
	return startChioUpAs(ctx, env, bin, "chio-up", nil)
}

// snapshotTrace has chio up write its execution trace's window now (the
// load just offered) when $CHIO_TRACE asked it to keep one.
func (u *chioUp) snapshotTrace(env *Env) {
	path := os.Getenv("CHIO_TRACE")
	if path == "" {
		return
	}
	if err := u.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		env.Logf("execution trace: %v", err)
		return
	}
	// Writing the window takes a moment; the log says when it is done.
	for range 100 {
		if strings.Contains(tailFile(u.log, 5), "execution trace written") {
			env.Logf("execution trace of the open loop: %s", path)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	env.Logf("execution trace: chio up did not say it wrote %s", path)
}

// startChioUpAs is startChioUp with its own data directory and log name,
// and extra environment variables (NAME=VALUE) for the process.
func startChioUpAs(ctx context.Context, env *Env, bin, name string, vars []string, args ...string) (*chioUp, error) {
	data := filepath.Join(env.Dir, name)
	c, m, err := startChildEnv(ctx, env, name, vars, chioUpReady, 60*time.Second, bin,
		append([]string{"up", "--data-dir", data, "--listen", "127.0.0.1:0", "--nats-listen", "none"}, args...)...)
	if err != nil {
		return nil, err
	}
	u := &chioUp{child: c, base: m[0]}
	tokPath := m[1]
	if !filepath.IsAbs(tokPath) {
		tokPath = filepath.Join(env.Dir, tokPath)
	}
	tok, err := os.ReadFile(tokPath)
	if err != nil {
		c.stop()
		return nil, fmt.Errorf("dev capability: %w", err)
	}
	if err := waitHTTP(ctx, u.base+"/readyz", 60*time.Second); err != nil {
		c.stop()
		return nil, fmt.Errorf("chio up: %w\n%s", err, c.tail())
	}
	u.target = &Target{
		URL:    u.base + "/a2a",
		Header: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(tok))}, "A2A-Version": {"1.0"}},
		State:  completed,
	}
	if env.DPoP {
		s, err := delegatingSigner(filepath.Join(data, "keys"))
		if err != nil {
			c.stop()
			return nil, err
		}
		u.target.Header.Del("Authorization")
		u.target.Signer = s
	}
	return u, nil
}

// ourCredential says how our load authenticates.
func ourCredential(env *Env) string {
	if env.DPoP {
		return "a capability that can delegate (hello-a2a-srv/*:invoke,delegate), so honoured only with proof of possession: `Authorization: DPoP` and a fresh RFC 9449 proof (EdDSA) per request, signed by the load generator, its one-time id claimed in a JetStream KV beside the decision write"
	}
	return "the dev capability as bearer token"
}

// delegatingSigner issues, from the issuer key chio up generated, a token
// that can delegate (so the edge honours it only with a proof) for a
// fresh agent key, and returns the agent's signer.
func delegatingSigner(keyDir string) (*dpop.Signer, error) {
	raw, err := os.ReadFile(filepath.Join(keyDir, "issuer.key"))
	if err != nil {
		return nil, fmt.Errorf("issuer key: %w", err)
	}
	issuer, err := schemas.ParsePrivateKey(string(raw))
	if err != nil {
		return nil, err
	}
	_, agent, err := ed25519.GenerateKey(nil)
	if err != nil {
		return nil, err
	}
	now := uint64(time.Now().Unix())
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: "bench-agent", Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject: schemas.EncodePublicKey(agent.Public().(ed25519.PublicKey)),
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "*",
			Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}}},
		IssuedAt: now - 5, ExpiresAt: now + 24*3600,
	})
	if err != nil {
		return nil, fmt.Errorf("issue the bench token: %w", err)
	}
	text, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		return nil, err
	}
	return dpop.NewSigner(agent, text)
}

var echoReady = regexp.MustCompile(`a2a-echo: JSON-RPC (http://\S+)`)

// runPeer starts a fresh a2a-echo (so its in-memory task store starts
// empty each run, as ours starts each run with its backlog signed), runs
// the closed loop against it, and stops it.
func runPeer(ctx context.Context, env *Env, bin string, conc int, warm, dur time.Duration) (*LoadResult, time.Duration, error) {
	c, m, err := startChild(ctx, env, "a2a-echo", echoReady, 30*time.Second, bin, "-listen", "127.0.0.1:0")
	if err != nil {
		return nil, 0, err
	}
	defer c.stop()
	t := &Target{URL: m[0], Header: http.Header{"A2A-Version": {"1.0"}}, State: completed}
	c0 := cpuTime(c.cmd.Process.Pid)
	res, err := closedLoop(ctx, t, conc, warm, dur)
	if err != nil {
		return nil, 0, err
	}
	cpu := cpuTime(c.cmd.Process.Pid) - c0
	if err := c.alive(); err != nil {
		return nil, 0, err
	}
	return res, cpu, nil
}

func runEdgeVsA2AGo(ctx context.Context, env *Env) (*Section, error) {
	chioBin, err := env.Chio(ctx)
	if err != nil {
		return nil, err
	}
	echoBin, err := env.Build(ctx, "scripts/bench", "./cmd/a2a-echo", "a2a-echo")
	if err != nil {
		return nil, err
	}
	up, err := startChioUp(ctx, env, chioBin)
	if err != nil {
		return nil, err
	}
	defer up.stop()
	pid := up.cmd.Process.Pid
	// Ready is not signed: the ledger's first checkpoint can follow
	// /readyz by a moment (seen in CI as a 404 here).
	if err := waitHTTP(ctx, up.base+"/log/checkpoint", 60*time.Second); err != nil {
		return nil, err
	}
	logged, err := logSize(ctx, up.base)
	if err != nil {
		return nil, err
	}

	levels := pick(env, []int{1, 16}, []int{1, 4, 16, 64})
	warm := pick(env, 100*time.Millisecond, 2*time.Second)
	dur := pick(env, 300*time.Millisecond, 8*time.Second)
	drainLimit := pick(env, 30*time.Second, 3*time.Minute)
	ours := make([]edgeSide, len(levels))
	peer := make([]edgeSide, len(levels))
	var maxDrain time.Duration
	genCPU, genReqs := time.Duration(0), 0

	// runOurs measures one closed-loop run and then waits for the ledger to
	// sign its receipts, so that neither the next run nor the peer's pays
	// for our backlog; the CPU charged to ours includes that signing.
	runOurs := func(i, conc int) error {
		c0, g0 := cpuTime(pid), selfCPU()
		res, err := closedLoop(ctx, up.target, conc, warm, dur)
		if err != nil {
			return err
		}
		genCPU += selfCPU() - g0
		genReqs += res.OK + res.Errors
		logged += res.OK
		d, err := waitLogSize(ctx, up.base, logged, drainLimit)
		if err != nil {
			return fmt.Errorf("receipts of the run at concurrency %d: %w\n%s", conc, err, up.tail())
		}
		maxDrain = max(maxDrain, d)
		if err := up.alive(); err != nil {
			return err
		}
		ours[i].runs = append(ours[i].runs, res)
		ours[i].cpu += cpuTime(pid) - c0
		ours[i].ok += res.OK
		env.Logf("edge: ours   c=%-3d %8s  p99 %-9s errors %d  (receipts signed %s after)", conc, fmtRate(res.Rate()), fmtDur(res.Lat.Pct(0.99)), res.Errors, d.Round(time.Millisecond))
		return nil
	}
	runA2AGo := func(i, conc int) error {
		g0 := selfCPU()
		res, cpu, err := runPeer(ctx, env, echoBin, conc, warm, dur)
		if err != nil {
			return err
		}
		genCPU += selfCPU() - g0
		genReqs += res.OK + res.Errors
		peer[i].runs = append(peer[i].runs, res)
		peer[i].cpu += cpu
		peer[i].ok += res.OK
		env.Logf("edge: a2a-go c=%-3d %8s  p99 %-9s errors %d", conc, fmtRate(res.Rate()), fmtDur(res.Lat.Pct(0.99)), res.Errors)
		return nil
	}
	for i, conc := range levels {
		for r := range env.Rounds {
			// Alternate which side goes first, so that neither always runs
			// on a machine warmed (or cluttered) by the other.
			first, second := runOurs, runA2AGo
			if r%2 == 1 {
				first, second = runA2AGo, runOurs
			}
			if err := first(i, conc); err != nil {
				return nil, err
			}
			if err := second(i, conc); err != nil {
				return nil, err
			}
		}
	}

	// Open loop at half our best closed-loop rate.
	best, bestConc := 0.0, 0
	for i := range levels {
		if v, ok := ours[i].rate(); ok && v > best {
			best, bestConc = v, levels[i]
		}
	}
	if best == 0 {
		n, first := ours[0].errors()
		return nil, fmt.Errorf("our edge served no error-free run (%d errors; first: %s)", n, first)
	}
	openWarm := pick(env, 100*time.Millisecond, 2*time.Second)
	openDur := pick(env, 500*time.Millisecond, 10*time.Second)
	half := best / 2
	open, err := openLoop(ctx, up.target, half, openWarm, openDur, 256)
	if err != nil {
		return nil, err
	}
	up.snapshotTrace(env)
	if err := up.alive(); err != nil {
		return nil, err
	}
	pubDecision, pubOutcome, perWrite := publishMeans(ctx, up.base)

	sec := &Section{
		Settings: []string{
			fmt.Sprintf("Machine: %d logical CPUs, shared by the load generator and the server under test (and whatever else runs): every figure is a whole-machine figure, not a server's alone.", runtime.NumCPU()),
			"Request: A2A 1.0 JSON-RPC `SendMessage` (header `A2A-Version: 1.0`), one text part \"world\", a fresh messageId per request, over keep-alive HTTP/1.1 (one connection per worker).",
			"Check of every answer: HTTP 200, a JSON-RPC 2.0 result with the request's id, no error, a task in TASK_STATE_COMPLETED; anything else is an error, and a run with errors shows its error count instead of a rate.",
			"Ours: `chio up --data-dir <fresh> --listen 127.0.0.1:0 --nats-listen none` as shipped (embedded JetStream, SyncAlways file storage; the edge publishes the decision and outcome events durably before it answers; the ledger signs receipts asynchronously; projections on), skill `hello_task`, " + ourCredential(env) + ", every guard on. `--nats-listen none` only drops NATS's TCP listener (the process talks to it in process).",
			"a2a-go: `cmd/a2a-echo`, a2a-go v2.4.0's `a2asrv.NewHandler` + `NewJSONRPCHandler` with the default in-memory task store and an executor that yields a submitted task, one artifact named \"result\" with the data part {\"arguments\":{\"text\":…},\"message\":\"hello from a2a\"}, then TASK_STATE_COMPLETED with the same data in its status message: the shape of `hello_task`'s answer, without governance or durability. A fresh process per run (its task store never shrinks).",
			fmt.Sprintf("Closed loop: %v workers, each sending back to back; %s warm-up, then %s measured; %d A/B rounds per level, alternating which side goes first; rate = median over rounds, latencies pooled. After each of our runs the harness waits until the ledger has signed every receipt of that run (its CPU is charged to ours) before the next run starts.", levels, warm, dur, env.Rounds),
			fmt.Sprintf("Open loop: our edge at half its best closed-loop rate (%s at concurrency %d): arrivals scheduled every 1/rate whatever the server does, up to 256 in flight, latency measured from each request's scheduled time (no coordinated omission); %s warm-up, %s measured.", fmtRate(best), bestConc, openWarm, openDur),
		},
	}
	t1 := Table{
		Caption: "SendMessage, closed loop: our edge (governed, durable) vs the bare a2a-go v2 server",
		Header:  []string{"concurrency", "ours req/s", "a2a-go req/s", "ratio", "ours p50 / p99", "a2a-go p50 / p99", "ours CPU/req", "a2a-go CPU/req"},
	}
	var worst, bestRatio float64 = 0, 0
	for i, conc := range levels {
		ro, okO := ours[i].rate()
		rp, okP := peer[i].rate()
		ratio := "n/a"
		if okO && okP {
			ratio = fmtRatio(ro, rp)
			q := ro / rp
			if worst == 0 || q < worst {
				worst = q
			}
			bestRatio = max(bestRatio, q)
		}
		t1.Rows = append(t1.Rows, []string{
			fmt.Sprint(conc), ours[i].rateCell(), peer[i].rateCell(), ratio,
			ours[i].latCell(), peer[i].latCell(),
			fmtCPU(ours[i].cpu, ours[i].ok), fmtCPU(peer[i].cpu, peer[i].ok),
		})
	}
	openLat := open.Lat
	t2 := Table{
		Caption: "Our edge, open loop at 50% of its best closed-loop rate (latency from the scheduled send time)",
		Header:  []string{"offered", "achieved", "p50", "p99", "p99.9", "errors"},
		Rows: [][]string{{
			fmtRate(open.Offered), fmtRate(open.Rate()),
			fmtDur(openLat.Pct(0.50)), fmtDur(openLat.Pct(0.99)), fmtDur(openLat.Pct(0.999)),
			fmt.Sprint(open.Errors),
		}},
	}
	sec.Tables = []Table{t1, t2}

	// Targets, from the figures above.
	bestPeer := 0.0
	for i := range levels {
		if v, ok := peer[i].rate(); ok {
			bestPeer = max(bestPeer, v)
		}
	}
	if bestPeer > 0 {
		sec.Findings = append(sec.Findings, fmt.Sprintf("Best rates: ours %s, a2a-go %s (%s); per level the ratio ranges %.2f×–%.2f×.",
			fmtRate(best), fmtRate(bestPeer), fmtRatio(best, bestPeer), worst, bestRatio))
	}
	// The throughput targets, per level: ours at least these times a2a-go.
	for i, conc := range levels {
		want, ok := map[int]float64{16: 1.0, 64: 1.5}[conc]
		ov, ok1 := ours[i].rate()
		pv, ok2 := peer[i].rate()
		if !ok || !ok1 || !ok2 || pv == 0 {
			continue
		}
		verdict := "missed"
		if ov >= want*pv {
			verdict = "met"
		}
		sec.Findings = append(sec.Findings, fmt.Sprintf("Throughput target at concurrency %d (ours ≥ %.1f× a2a-go): %s, %s vs %s (%s).",
			conc, want, verdict, fmtRate(ov), fmtRate(pv), fmtRatio(ov, pv)))
	}
	const tailTarget = 20 * time.Millisecond
	p99 := openLat.Pct(0.99)
	switch {
	case open.Errors > 0:
		sec.Findings = append(sec.Findings, fmt.Sprintf("Latency target (open-loop p99 < %s at half load): not measured: %v.", fmtDur(tailTarget), open.Err()))
	case open.Requests == 0:
		sec.Findings = append(sec.Findings, fmt.Sprintf("Latency target (open-loop p99 < %s at half load): not measured: no request completed in the open-loop window.", fmtDur(tailTarget)))
	case p99 < tailTarget:
		sec.Findings = append(sec.Findings, fmt.Sprintf("Latency target (open-loop p99 < %s at half load): met, p99 %s at %s offered (%s achieved).", fmtDur(tailTarget), fmtDur(p99), fmtRate(open.Offered), fmtRate(open.Rate())))
	default:
		sec.Findings = append(sec.Findings, fmt.Sprintf("Latency target (open-loop p99 < %s at half load): missed, p99 %s at %s offered (%s achieved).", fmtDur(tailTarget), fmtDur(p99), fmtRate(open.Offered), fmtRate(open.Rate())))
	}
	for i, conc := range levels {
		for _, s := range []struct {
			name string
			side *edgeSide
		}{{"ours", &ours[i]}, {"a2a-go", &peer[i]}} {
			if n, first := s.side.errors(); n > 0 {
				sec.Findings = append(sec.Findings, fmt.Sprintf("Errors: %s at concurrency %d: %d; first: %s", s.name, conc, n, first))
			}
		}
	}
	if pubDecision > 0 {
		sec.Findings = append(sec.Findings, fmt.Sprintf("Each of our calls waits for two rounds of JetStream writes acknowledged after an fsync (SyncAlways): its decision event, then its outcome event with its task's one commit beside it. Over the section the write carrying a decision took %s and the one carrying an outcome %s on average, and concurrent calls shared writes: %.1f events per write (from chio's /metrics).", fmtDur(pubDecision), fmtDur(pubOutcome), perWrite))
	}
	bestCores := 0.0
	for i := range levels {
		if levels[i] == bestConc && ours[i].ok > 0 {
			bestCores = ours[i].cpu.Seconds() / float64(ours[i].ok) * best
		}
	}
	sec.Findings = append(sec.Findings,
		fmt.Sprintf("CPU per request (server process, user+system): the columns above; ours includes NATS, the ledger signing the receipt and the projections, all in the one process. The load generator used %s per request.", fmtCPU(genCPU, genReqs)),
		fmt.Sprintf("Receipts kept up: after each of our runs the ledger had signed every receipt within %s.", maxDrain.Round(time.Millisecond)),
	)
	sec.Findings = append(sec.Findings,
		fmt.Sprintf("What bounds our edge: fsyncs and CPU. A blocking SendMessage waits for its decision event (CHIO_EVENTS, written by a coalescing writer that shares one synced write among the calls queued behind it), then for its outcome event and, concurrently, its task's one commit (CHIO_TASKS: one subject per task with a compare-and-set per commit); section 1 gives this disk's fsync cost per write, and every stream, the ledger's Pebble WAL and the consumers' state files share the one disk. At its best rate (%s, concurrency %d) chio up, which also runs NATS, the ledger and the projections, used %.2f of the %d cores.", fmtRate(best), bestConc, bestCores, runtime.NumCPU()),
		"The a2a-go server keeps its tasks in memory and writes nothing to disk: the comparison prices durability and governance together, not the HTTP/JSON-RPC layer alone.",
		fmt.Sprintf("The machine has %d logical CPUs for the generator, the server and anything else running; the CPU/req columns are the figures that travel to a bigger machine, the rates are not.", runtime.NumCPU()),
	)
	return sec, nil
}

// publishMeans reads the mean decision and outcome publish latencies from
// chio's /metrics; zero when they cannot be read.
func publishMeans(ctx context.Context, base string) (decision, outcome time.Duration, eventsPerWrite float64) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return 0, 0, 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, 0
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, 0
	}
	text := string(b)
	mean := func(event string) time.Duration {
		sum := metricValue(text, `chio_edge_publish_duration_seconds_sum{event="`+event+`",result="ok"}`)
		n := metricValue(text, `chio_edge_publish_duration_seconds_count{event="`+event+`",result="ok"}`)
		if n == 0 {
			return 0
		}
		return time.Duration(sum / n * float64(time.Second))
	}
	if n := metricValue(text, "chio_edge_publish_events_per_write_count"); n > 0 {
		eventsPerWrite = metricValue(text, "chio_edge_publish_events_per_write_sum") / n
	}
	return mean("decision"), mean("outcome"), eventsPerWrite
}

// metricValue finds "name value" in a Prometheus text exposition.
func metricValue(text, name string) float64 {
	i := strings.Index(text, name+" ")
	if i < 0 {
		return 0
	}
	rest := text[i+len(name)+1:]
	if j := strings.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	var v float64
	if _, err := fmt.Sscan(rest, &v); err != nil {
		return 0
	}
	return v
}
