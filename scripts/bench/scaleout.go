package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Section 5: one edge replica against two, on the local cluster of
// scripts/cluster.sh (3 NATS nodes with R3 streams, 2 ledgers, projections,
// 2 edges, Caddy round-robin), with the edge section's load generator.

// clusterPorts are every loopback port scripts/cluster.sh binds.
var clusterPorts = []int{14222, 14223, 14224, 16222, 16223, 16224, 18222, 18223, 18224,
	18080, 18081, 18082, 18083, 18091, 18092}

const (
	proxyURL = "https://127.0.0.1:18080" // TLS under the cluster's internal CA
	edge1URL = "http://127.0.0.1:18091"
)

// busyPort returns the first cluster port something listens on, or 0.
func busyPort() int {
	for _, p := range clusterPorts {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			return p
		}
		ln.Close()
	}
	return 0
}

// waitPortsFree polls until no cluster port is taken (a docker-compose
// cluster of a CI run may hold them for a while).
func waitPortsFree(ctx context.Context, env *Env, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for logged := false; ; {
		p := busyPort()
		if p == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("port 127.0.0.1:%d is still in use after %s (a docker-compose cluster? see `docker ps`); the local cluster needs ports %v", p, limit, clusterPorts)
		}
		if !logged {
			env.Logf("scaleout: port %d is busy; waiting up to %s for it to free", p, limit)
			logged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// cluster drives scripts/cluster.sh with its state under env.Dir.
type cluster struct {
	env *Env
	dir string
	log string
}

// sh runs `scripts/cluster.sh args...`, its output appended to the log.
func (c *cluster) sh(ctx context.Context, args ...string) error {
	f, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(c.env.Repo, "scripts", "cluster.sh")}, args...)...)
	cmd.Dir = c.env.Repo
	cmd.Env = append(os.Environ(), "CHIO_CLUSTER_DIR="+c.dir)
	cmd.Stdout, cmd.Stderr = f, f
	// cluster.sh starts its processes with nohup in their own right: a
	// cancelled `up` must not leave bash holding the log open forever.
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster.sh %s: %w\n%s", strings.Join(args, " "), err, tailFile(c.log, 20))
	}
	return nil
}

// token issues a capability for hello_task to a fresh subject key, in the
// Authorization header's form.
func (c *cluster) token(ctx context.Context) (string, error) {
	chio := filepath.Join(c.dir, "bin", "chio")
	key := filepath.Join(c.env.Dir, "agent.key")
	pub, err := exec.CommandContext(ctx, chio, "capability", "keygen", "--out", key).Output()
	if err != nil {
		return "", fmt.Errorf("capability keygen: %w", err)
	}
	out, err := exec.CommandContext(ctx, chio, "capability", "issue", "--issuer-key", filepath.Join(c.dir, "keys", "issuer.key"),
		"--subject", strings.TrimSpace(string(pub)), "--grant", "hello-a2a-srv/hello_task", "--ttl", "24h", "--output", "header").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("capability issue: %w: %s", err, ee.Stderr)
		}
		return "", fmt.Errorf("capability issue: %w", err)
	}
	tok := strings.TrimSpace(string(out))
	if !strings.HasPrefix(tok, "Bearer ") {
		tok = "Bearer " + tok
	}
	return tok, nil
}

// logSize is the larger checkpoint size of the two ledgers (the one that
// holds the writer lease signs; the other follows).
func (c *cluster) logSize(ctx context.Context) (int, error) {
	best, errs := -1, []string{}
	for _, u := range []string{"http://127.0.0.1:18081", "http://127.0.0.1:18082"} {
		n, err := logSize(ctx, u)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		best = max(best, n)
	}
	if best < 0 {
		return 0, fmt.Errorf("no ledger answers: %s", strings.Join(errs, "; "))
	}
	return best, nil
}

// waitLog waits until the ledgers hold want receipts.
func (c *cluster) waitLog(ctx context.Context, want int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := c.logSize(ctx)
		if err == nil && n >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			return 0, fmt.Errorf("ledgers hold %d of %d receipts after %s (%v)", n, want, limit, err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// upstreams asks the proxy n times for the agent card and returns the
// distinct edges that answered (Caddy's X-Chio-Upstream header).
func upstreams(ctx context.Context, roots *x509.CertPool, n int) (map[string]int, error) {
	seen := map[string]int{}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer client.CloseIdleConnections()
	for range n {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, proxyURL+"/.well-known/agent-card.json", nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("proxy: %w", err)
		}
		drainBody(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("proxy: agent card: HTTP %d", resp.StatusCode)
		}
		seen[resp.Header.Get("X-Chio-Upstream")]++
	}
	return seen, nil
}

// waitUpstreams polls the proxy until exactly the wanted number of edges
// answer (after a kill, Caddy's health check needs a second or two).
func waitUpstreams(ctx context.Context, roots *x509.CertPool, want int, limit time.Duration) (map[string]int, error) {
	deadline := time.Now().Add(limit)
	for {
		seen, err := upstreams(ctx, roots, 8)
		if err == nil && len(seen) == want {
			return seen, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("proxy spreads over %v (err %v), want %d edges, after %s", seen, err, want, limit)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// scaleConfig is one measured configuration.
type scaleConfig struct {
	name string
	url  string
	runs map[int][]*LoadResult // by concurrency
}

func runScaleOut(ctx context.Context, env *Env) (sec *Section, err error) {
	began := time.Now()
	if err := waitPortsFree(ctx, env, pick(env, 3*time.Minute, 5*time.Minute)); err != nil {
		return nil, err
	}
	c := &cluster{env: env, dir: filepath.Join(env.Dir, "cluster"), log: filepath.Join(env.Dir, "cluster.log")}
	defer func() {
		// Always down, also when ctx is cancelled: its own bounded context.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if derr := c.sh(dctx, "down"); derr != nil && err == nil {
			err = derr
		}
	}()
	upStart := time.Now()
	if err := c.sh(ctx, "up"); err != nil {
		return nil, err
	}
	upTook := time.Since(upStart)
	env.Logf("scaleout: cluster up in %s", upTook.Round(time.Second))
	tok, err := c.token(ctx)
	if err != nil {
		return nil, err
	}
	hdr := http.Header{"Authorization": {tok}, "A2A-Version": {"1.0"}}
	// The proxy serves TLS under the internal CA keygen made.
	caPEM, err := os.ReadFile(filepath.Join(c.dir, "keys", "nats", "ca.pem"))
	if err != nil {
		return nil, fmt.Errorf("scaleout: the cluster's CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("scaleout: the cluster's CA is not PEM")
	}
	// The writer signs its first checkpoint a moment after it is up.
	if _, err := c.waitLog(ctx, 0, time.Minute); err != nil {
		return nil, err
	}
	logged, err := c.logSize(ctx)
	if err != nil {
		return nil, err
	}
	if seen, err := waitUpstreams(ctx, roots, 2, 30*time.Second); err != nil {
		return nil, err
	} else {
		env.Logf("scaleout: proxy spreads over %v", seen)
	}

	levels := pick(env, []int{16}, []int{16, 64})
	warm := pick(env, 200*time.Millisecond, 2*time.Second)
	dur := pick(env, time.Second, 8*time.Second)
	drainLimit := pick(env, time.Minute, 3*time.Minute)
	direct := &scaleConfig{name: "(a) direct to edge-1", url: edge1URL + "/a2a", runs: map[int][]*LoadResult{}}
	both := &scaleConfig{name: "(b) proxy, edge-1 + edge-2", url: proxyURL + "/a2a", runs: map[int][]*LoadResult{}}
	one := &scaleConfig{name: "(c) proxy, edge-1 only (edge-2 killed)", url: proxyURL + "/a2a", runs: map[int][]*LoadResult{}}
	var maxDrain time.Duration
	measure := func(sc *scaleConfig, conc int) error {
		res, err := closedLoop(ctx, &Target{URL: sc.url, Header: hdr, State: completed, RootCAs: roots}, conc, warm, dur)
		if err != nil {
			return err
		}
		// Receipts are signed asynchronously: let the ledger catch up so
		// that its backlog does not slow the next configuration down.
		logged += res.OK
		d, err := c.waitLog(ctx, logged, drainLimit)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		maxDrain = max(maxDrain, d)
		sc.runs[conc] = append(sc.runs[conc], res)
		env.Logf("scaleout: %-40s c=%-3d %8s p99 %-9s errors %d (receipts signed %s after)", sc.name, conc, fmtRate(res.Rate()), fmtDur(res.Lat.Pct(0.99)), res.Errors, d.Round(time.Millisecond))
		return nil
	}
	// Each round measures (a) and (b) in alternating order, then (c) with
	// edge-2 killed, then restarts edge-2: one replica and two alternate
	// over the same growing streams and log, so neither side is measured
	// only on the larger state.
	for r := range env.Rounds {
		for _, conc := range levels {
			first, second := direct, both
			if r%2 == 1 {
				first, second = both, direct
			}
			if err := measure(first, conc); err != nil {
				return nil, err
			}
			if err := measure(second, conc); err != nil {
				return nil, err
			}
		}
		if err := c.sh(ctx, "kill", "edge-2"); err != nil {
			return nil, err
		}
		if _, err := waitUpstreams(ctx, roots, 1, 30*time.Second); err != nil {
			return nil, fmt.Errorf("after killing edge-2: %w", err)
		}
		for _, conc := range levels {
			if err := measure(one, conc); err != nil {
				return nil, err
			}
		}
		if err := c.sh(ctx, "start", "edge-2"); err != nil {
			return nil, err
		}
		if _, err := waitUpstreams(ctx, roots, 2, time.Minute); err != nil {
			return nil, fmt.Errorf("after restarting edge-2: %w", err)
		}
	}

	sec = &Section{
		Settings: []string{
			fmt.Sprintf("Machine: %d logical CPUs shared by every process of the cluster (3 nats-server, 2 ledgers, projections, 2 edges, Caddy) and the load generator.", runtime.NumCPU()),
			"Topology: `scripts/cluster.sh up` (CHIO_CLUSTER_DIR under the section's scratch directory): streams and KV with 3 replicas, ledgers active/standby, edges `chio edge a2a --replicas 3`, Caddy round_robin over 127.0.0.1:18091 and :18092 (health check /readyz every 1 s).",
			"Caller: a capability for hello-a2a-srv/hello_task issued by the cluster's issuer key to a fresh subject key (the edges have no dev capability), as bearer token.",
			fmt.Sprintf("Load: the edge section's generator (A2A 1.0 JSON-RPC SendMessage, every answer checked), closed loop at concurrency %v, %s warm-up + %s measured per run; %d rounds, each: (a) and (b) in alternating order, then `cluster.sh kill edge-2`, the proxy's health check awaited until only edge-1 answers, (c), and `cluster.sh start edge-2` until both answer again. After every run the harness waits until the ledgers have signed all of its receipts.", levels, warm, dur, env.Rounds),
			fmt.Sprintf("Time: cluster up %s; the whole section %s%s.", upTook.Round(time.Second), time.Since(began).Round(time.Second), pick(env, " (short mode: what the CI check costs)", "")),
		},
	}
	t := Table{
		Caption: "SendMessage through the cluster: one edge replica vs two",
		Header:  []string{"configuration", "concurrency", "req/s", "p50", "p99", "errors"},
	}
	rate := func(sc *scaleConfig, conc int) (float64, bool) {
		s := edgeSide{runs: sc.runs[conc]}
		return s.rate()
	}
	for _, sc := range []*scaleConfig{direct, both, one} {
		for _, conc := range levels {
			s := edgeSide{runs: sc.runs[conc]}
			l := s.lat()
			n, _ := s.errors()
			t.Rows = append(t.Rows, []string{sc.name, fmt.Sprint(conc), s.rateCell(), fmtDur(l.Pct(0.50)), fmtDur(l.Pct(0.99)), fmt.Sprint(n)})
		}
	}
	sec.Tables = []Table{t}
	for _, conc := range levels {
		b, okB := rate(both, conc)
		o, okO := rate(one, conc)
		a, okA := rate(direct, conc)
		if okB && okO {
			sec.Findings = append(sec.Findings, fmt.Sprintf("Scale factor at concurrency %d, two replicas over one behind the same proxy, (b)/(c): %s (%s vs %s).", conc, fmtRatio(b, o), fmtRate(b), fmtRate(o)))
		}
		if okA && okO {
			sec.Findings = append(sec.Findings, fmt.Sprintf("Proxy hop at concurrency %d, (c)/(a): %s.", conc, fmtRatio(o, a)))
		}
	}
	for _, sc := range []*scaleConfig{direct, both, one} {
		for _, conc := range levels {
			s := edgeSide{runs: sc.runs[conc]}
			if n, first := s.errors(); n > 0 {
				sec.Findings = append(sec.Findings, fmt.Sprintf("Errors: %s at concurrency %d: %d; first: %s", sc.name, conc, n, first))
			}
		}
	}
	sec.Findings = append(sec.Findings,
		fmt.Sprintf("Receipts kept up: after every run the ledgers had signed all of its receipts within %s.", maxDrain.Round(time.Millisecond)),
		"What bounds it: every call makes two rounds of writes to streams with 3 replicas (its decision event; then its outcome event and its task's commit), each acknowledged only once a quorum of the NATS nodes has it (the cluster's nats-server files use the default sync interval, so here replication, not fsync, is the durability); each edge's writer shares a write among the calls queued behind it and the stream leaders group queued proposals, but a stream still orders its writes through its leader, and both edges write to the same streams, so a second edge adds request-handling capacity but not stream throughput. On one machine the 3 NATS nodes, both ledgers, the projections, both edges, Caddy and the generator share the same cores, so a second replica cannot add CPU either; where the scale factor is near 1×, the edges are not the bottleneck.",
	)
	return sec, nil
}
