package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// Section 7: the demo tool run in process (chio up as shipped) against the
// same tool on chio worker processes (chio up --workers), which the edge
// reaches by NATS request/reply: what remote dispatch costs per governed
// call, and whether a second worker changes anything.

var (
	upNATSReady = regexp.MustCompile(`chio up: NATS JetStream on (nats://\S+)`)
	workerReady = regexp.MustCompile(`chio worker: serving hello-a2a-srv`)
)

// startChioUpWithWorkers starts `chio up --workers` with NATS on a local
// port, and one `chio worker --demo` on it (chio up waits for it).
func startChioUpWithWorkers(ctx context.Context, env *Env, bin string) (*chioUp, *child, error) {
	data := filepath.Join(env.Dir, "chio-up-workers")
	c, m, err := startChild(ctx, env, "chio-up-workers", upNATSReady, 60*time.Second, bin,
		"up", "--data-dir", data, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--workers")
	if err != nil {
		return nil, nil, err
	}
	w, err := startWorker(ctx, env, bin, m[0], "worker-1")
	if err != nil {
		c.stop()
		return nil, nil, err
	}
	ready, err := waitLogMatch(ctx, c, chioUpReady, 60*time.Second)
	if err != nil {
		w.stop()
		c.stop()
		return nil, nil, err
	}
	u := &chioUp{child: c, base: ready[0]}
	tokPath := ready[1]
	if !filepath.IsAbs(tokPath) {
		tokPath = filepath.Join(env.Dir, tokPath)
	}
	tok, err := os.ReadFile(tokPath)
	if err == nil {
		err = waitHTTP(ctx, u.base+"/log/checkpoint", 60*time.Second)
	}
	if err != nil {
		w.stop()
		c.stop()
		return nil, nil, fmt.Errorf("chio up --workers: %w\n%s", err, c.tail())
	}
	u.target = &Target{
		URL:    u.base + "/a2a",
		Header: http.Header{"Authorization": {"Bearer " + strings.TrimSpace(string(tok))}, "A2A-Version": {"1.0"}},
		State:  completed,
	}
	return u, w, nil
}

func startWorker(ctx context.Context, env *Env, bin, natsURL, name string) (*child, error) {
	// Signed with chio up's manifest key, the one its --workers pins.
	key := filepath.Join(env.Dir, "chio-up-workers", "keys", "manifest.key")
	// chio up's NATS takes only its roles' credentials: the worker's.
	nkey := filepath.Join(env.Dir, "chio-up-workers", "nats-creds", "worker.nk")
	w, _, err := startChild(ctx, env, name, workerReady, 60*time.Second, bin, "worker", "--demo", "--nats", natsURL, "--nats-nkey", nkey,
		"--name", name, "--manifest-key", key,
		// It runs only calls an edge chio up's issuer certified signed.
		"--edge-issuer", filepath.Join(env.Dir, "chio-up-workers", "keys", "issuer.pub"))
	return w, err
}

// natsURLOf is the NATS address chio up printed.
func natsURLOf(c *child) string {
	b, _ := os.ReadFile(c.log)
	if m := upNATSReady.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// waitLogMatch waits until the child's log matches re; it returns re's
// groups.
func waitLogMatch(ctx context.Context, c *child, re *regexp.Regexp, limit time.Duration) ([]string, error) {
	deadline := time.Now().Add(limit)
	for {
		if b, err := os.ReadFile(c.log); err == nil {
			if m := re.FindSubmatch(b); m != nil {
				out := make([]string, len(m)-1)
				for i := range out {
					out[i] = string(m[i+1])
				}
				return out, nil
			}
		}
		if err := c.alive(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s not ready after %s:\n%s", c.name, limit, c.tail())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func runWorkers(ctx context.Context, env *Env) (*Section, error) {
	bin, err := env.Chio(ctx)
	if err != nil {
		return nil, err
	}
	local, err := startChioUp(ctx, env, bin)
	if err != nil {
		return nil, err
	}
	defer local.stop()
	if err := waitHTTP(ctx, local.base+"/log/checkpoint", 60*time.Second); err != nil {
		return nil, err
	}
	remote, w1, err := startChioUpWithWorkers(ctx, env, bin)
	if err != nil {
		return nil, err
	}
	defer remote.stop()
	defer w1.stop()
	workers := []*child{w1}

	levels := pick(env, []int{1, 8}, []int{1, 16, 64})
	warm := pick(env, 100*time.Millisecond, 2*time.Second)
	dur := pick(env, 300*time.Millisecond, 8*time.Second)
	drainLimit := pick(env, 30*time.Second, 3*time.Minute)

	type side struct {
		up      *chioUp
		workers func() []*child
		logged  int
		res     []edgeSide
	}
	mk := func(u *chioUp, ws func() []*child) (*side, error) {
		n, err := logSize(ctx, u.base)
		if err != nil {
			return nil, err
		}
		return &side{up: u, workers: ws, logged: n, res: make([]edgeSide, len(levels))}, nil
	}
	inProc, err := mk(local, func() []*child { return nil })
	if err != nil {
		return nil, err
	}
	one, err := mk(remote, func() []*child { return workers })
	if err != nil {
		return nil, err
	}
	// measure runs one closed-loop run, waits for its receipts, and
	// charges the CPU of chio up and of its workers to the side.
	measure := func(s *side, i, conc int, label string) error {
		procs := append([]*child{s.up.child}, s.workers()...)
		cpu0 := time.Duration(0)
		for _, p := range procs {
			cpu0 += cpuTime(p.cmd.Process.Pid)
		}
		res, err := closedLoop(ctx, s.up.target, conc, warm, dur)
		if err != nil {
			return err
		}
		s.logged += res.OK
		if _, err := waitLogSize(ctx, s.up.base, s.logged, drainLimit); err != nil {
			return fmt.Errorf("receipts of the %s run at concurrency %d: %w\n%s", label, conc, err, s.up.tail())
		}
		cpu1 := time.Duration(0)
		for _, p := range procs {
			if err := p.alive(); err != nil {
				return err
			}
			cpu1 += cpuTime(p.cmd.Process.Pid)
		}
		s.res[i].runs = append(s.res[i].runs, res)
		s.res[i].cpu += cpu1 - cpu0
		s.res[i].ok += res.OK
		env.Logf("workers: %-10s c=%-3d %8s  p50 %-9s p99 %-9s errors %d", label, conc, fmtRate(res.Rate()), fmtDur(res.Lat.Pct(0.50)), fmtDur(res.Lat.Pct(0.99)), res.Errors)
		return nil
	}
	for i, conc := range levels {
		for r := range env.Rounds {
			a, b := inProc, one
			la, lb := "in-process", "1 worker"
			if r%2 == 1 {
				a, b, la, lb = b, a, lb, la
			}
			if err := measure(a, i, conc, la); err != nil {
				return nil, err
			}
			if err := measure(b, i, conc, lb); err != nil {
				return nil, err
			}
		}
	}
	two := &side{up: remote, workers: func() []*child { return workers }, logged: one.logged, res: make([]edgeSide, len(levels))}
	w2, err := startWorker(ctx, env, bin, natsURLOf(remote.child), "worker-2")
	if err != nil {
		return nil, err
	}
	defer w2.stop()
	workers = append(workers, w2)
	for i, conc := range levels {
		for range env.Rounds {
			if err := measure(two, i, conc, "2 workers"); err != nil {
				return nil, err
			}
		}
	}

	sec := &Section{
		Settings: []string{
			fmt.Sprintf("Machine: %d logical CPUs shared by the load generator, chio up and its workers.", runtime.NumCPU()),
			"Request: A2A 1.0 JSON-RPC `SendMessage` with the dev capability as bearer token, skill `hello_task`, checked as in section 3 (a completed task).",
			"In process: `chio up --nats-listen none` as shipped, the demo tool compiled in. Workers: `chio up --nats-listen 127.0.0.1:0 --workers` with `chio worker --demo --nats <its address> --nats-nkey <its worker.nk>` processes: the edge makes the decision durable, then sends the call to the `chio-tools` service by NATS request/reply (queue group: one worker per call) over loopback TCP, and makes the outcome durable when the answer comes.",
			fmt.Sprintf("Closed loop at %v; %s warm-up, %s measured; %d rounds per level, in-process and 1 worker alternating which goes first, then a second worker started and 2 workers measured; after each run the harness waits until every receipt of the run is signed. CPU per request is chio up's plus its workers'.", levels, warm, dur, env.Rounds),
		},
	}
	t := Table{
		Caption: "SendMessage, closed loop: the tool in process vs on workers",
		Header:  []string{"concurrency", "in-process req/s", "1 worker req/s", "2 workers req/s", "in-process p50 / p99", "1 worker p50 / p99", "2 workers p50 / p99", "in-process CPU/req", "1 worker CPU/req", "2 workers CPU/req"},
	}
	for i, conc := range levels {
		t.Rows = append(t.Rows, []string{fmt.Sprint(conc),
			inProc.res[i].rateCell(), one.res[i].rateCell(), two.res[i].rateCell(),
			inProc.res[i].latCell(), one.res[i].latCell(), two.res[i].latCell(),
			fmtCPU(inProc.res[i].cpu, inProc.res[i].ok), fmtCPU(one.res[i].cpu, one.res[i].ok), fmtCPU(two.res[i].cpu, two.res[i].ok)})
	}
	sec.Tables = []Table{t}
	for i, conc := range levels {
		a, b := inProc.res[i].lat(), one.res[i].lat()
		if len(a) > 0 && len(b) > 0 {
			sec.Findings = append(sec.Findings, fmt.Sprintf("Concurrency %d: a worker adds %s to the median call (p50 %s in process, %s on a worker).",
				conc, fmtDur(b.Pct(0.50)-a.Pct(0.50)), fmtDur(a.Pct(0.50)), fmtDur(b.Pct(0.50))))
		}
	}
	sec.Findings = append(sec.Findings,
		"What remote dispatch adds per call: one NATS request/reply (the request, the worker's decode and answer, the reply) between the two durable writes every call makes anyway; `go test -bench . ./edges/worker` prices it alone, without governance, on in-process NATS connections.",
		"The demo tool does no work: a second worker spreads calls, but on one machine it only adds a process competing for the same cores. Workers pay off when tools are slow or heavy, or need their own machines.",
	)
	return sec, nil
}
