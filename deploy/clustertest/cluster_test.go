// Package clustertest runs the distributed topology for real and breaks it:
// the docker-compose cluster (three NATS nodes, active and standby ledgers,
// projections, two edges behind Caddy) under load from the a2a-go client
// while NATS nodes, an edge and the active ledger are killed or cut off.
// It then checks that nothing the client saw succeed was lost or doubled.
//
// It runs on demand (CHIO_CLUSTER_TEST=compose, after scripts/images.sh),
// as .ci/run does; without a container engine it skips and says so.
package clustertest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/lease"
	"github.com/chio-ledger/chio/ledger/verify"
	"github.com/chio-ledger/chio/schemas"
)

// Host ports the compose file publishes (its defaults).
const (
	proxyURL    = "https://127.0.0.1:18080" // TLS under the cluster's internal CA
	natsURL     = "nats://127.0.0.1:14222"
	projectName = "chio-failover"
)

var ledgerURLs = map[string]string{"ledger-1": "http://127.0.0.1:18081", "ledger-2": "http://127.0.0.1:18082"}

func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// compose drives the project's own compose cluster, and nothing else.
type compose struct {
	t    testing.TB
	root string
	dir  string // CHIO_CLUSTER_DIR: keys
}

func (c *compose) run(ctx context.Context, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.root
	cmd.Env = append(os.Environ(), "CHIO_CLUSTER_DIR="+c.dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

func (c *compose) dc(ctx context.Context, args ...string) (string, error) {
	bin, base := composeCommand()
	return c.run(ctx, bin, append(append(base, "-p", projectName, "-f", "docker-compose.yml"), args...)...)
}

// composeCommand prefers the docker-compose binary (Compose v1, as on the
// project's machines), else the `docker compose` plugin.
func composeCommand() (string, []string) {
	if _, err := exec.LookPath("docker-compose"); err == nil {
		return "docker-compose", nil
	}
	return "docker", []string{"compose"}
}

func (c *compose) container(ctx context.Context, service string) string {
	out, err := c.dc(ctx, "ps", "-q", service)
	if err != nil || strings.TrimSpace(out) == "" {
		c.t.Fatalf("no container for %s: %v", service, err)
	}
	return strings.TrimSpace(strings.Split(strings.TrimSpace(out), "\n")[0])
}

func (c *compose) docker(ctx context.Context, args ...string) {
	c.t.Helper()
	if _, err := c.run(ctx, "docker", args...); err != nil {
		c.t.Fatal(err)
	}
}

func (c *compose) network() string {
	return projectName + "_chio"
}

func engineAvailable() error {
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("no docker client on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Errorf("docker engine not reachable: %v: %s", err, bytes.TrimSpace(out))
	}
	for _, img := range []string{"chio-ledger/chio:dev", "chio-ledger/nats:dev", "chio-ledger/caddy:dev"} {
		if err := exec.CommandContext(ctx, "docker", "image", "inspect", img).Run(); err != nil {
			return fmt.Errorf("image %s is missing: run bash scripts/images.sh first", img)
		}
	}
	return nil
}

// anonymous is get's token for a read without a credential: the public
// half of the log (checkpoints, hash tiles, consistency proofs) and the
// probes and agent card are read so, which checks they stay public.
const anonymous = ""

// serviceToken is the cluster's bootstrap read credential: the compose file
// and scripts/cluster.sh give the ledgers and the projections
// $CHIO_SERVICE_TOKEN, cluster-dev-token by default. The private half of the
// log (receipts, inclusion proofs, entry bundles) is read with it.
func serviceToken() string {
	if tok := os.Getenv("CHIO_SERVICE_TOKEN"); tok != "" {
		return tok
	}
	return "cluster-dev-token"
}

// get reads url with token as its bearer credential, or anonymously.
func get(ctx context.Context, token, url string) (int, []byte, error) {
	return getVia(ctx, http.DefaultClient, token, url)
}

// getVia is get through client.
func getVia(ctx context.Context, client *http.Client, token, url string) (int, []byte, error) {
	// Bounded on its own: a read from a node that was just killed or cut
	// off must fail and be retried, not wait for the run's deadline.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != anonymous {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func waitUntil(ctx context.Context, t testing.TB, what string, limit time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > limit || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return time.Since(start)
}

func ready(ctx context.Context, url string) bool {
	return readyVia(ctx, http.DefaultClient, url)
}

func readyVia(ctx context.Context, client *http.Client, url string) bool {
	status, _, err := getVia(ctx, client, anonymous, url+"/readyz")
	return err == nil && status == http.StatusOK
}

// proxyTransport trusts the cluster's internal CA (KEYS/nats/ca.pem), the
// one the proxy's certificate (keygen --https-host) chains to, and no
// other root.
func proxyTransport(t testing.TB, keys string) *http.Transport {
	t.Helper()
	pem, err := os.ReadFile(filepath.Join(keys, "nats", natsauth.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		t.Fatal("the cluster's CA is not PEM")
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots}
	return tr
}

// checkProxyTLS: the proxy speaks only TLS, with a certificate only the
// cluster's CA vouches for.
func checkProxyTLS(ctx context.Context, t testing.TB, pt http.RoundTripper) {
	t.Helper()
	if _, _, err := get(ctx, anonymous, proxyURL+"/readyz"); err == nil {
		t.Fatal("a client trusting only the system roots accepted the proxy's certificate")
	}
	plain := strings.Replace(proxyURL, "https://", "http://", 1)
	if status, _, err := get(ctx, anonymous, plain+"/readyz"); err == nil && status < 400 {
		t.Fatalf("the proxy answered plain HTTP: %d", status)
	}
	if !readyVia(ctx, &http.Client{Transport: pt}, proxyURL) {
		t.Fatal("the proxy is not ready over TLS")
	}
}

// call is one load-generator call as the client saw it.
type call struct {
	ok       bool
	taskID   string
	receipt  string
	upstream string // the edge Caddy sent it to
	at       time.Time
	failure  string // why the client saw it fail
}

// upstreamRecorder is a per-worker transport: it adds the capability and
// remembers which edge answered the worker's last request.
type upstreamRecorder struct {
	token string
	base  http.RoundTripper // trusts the proxy's CA (proxyTransport)
	last  atomic.Value
}

func (u *upstreamRecorder) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+u.token)
	resp, err := u.base.RoundTrip(r)
	if err == nil {
		u.last.Store(resp.Header.Get("X-Chio-Upstream"))
	}
	return resp, err
}

// topology is a running cluster the test can break, one process at a time.
type topology interface {
	kill(ctx context.Context, name string)
	start(ctx context.Context, name string)
	// partition cuts name off the network until heal; false if the
	// topology cannot (local processes share loopback).
	partition(ctx context.Context, name string) bool
	heal(ctx context.Context, name string)
	// upstream is the address the proxy names (X-Chio-Upstream) for an edge.
	upstream(edge string) string
}

func (c *compose) kill(ctx context.Context, name string) {
	c.docker(ctx, "kill", c.container(ctx, name))
}

func (c *compose) start(ctx context.Context, name string) {
	c.docker(ctx, "start", c.container(ctx, name))
}

func (c *compose) upstream(edge string) string { return edge + ":8080" }

func (c *compose) partition(ctx context.Context, name string) bool {
	c.docker(ctx, "network", "disconnect", c.network(), c.container(ctx, name))
	return true
}

func (c *compose) heal(ctx context.Context, name string) {
	c.docker(ctx, "network", "connect", "--alias", name, c.network(), c.container(ctx, name))
}

// processes is scripts/cluster.sh's topology: the same processes on loopback.
type processes struct {
	t    testing.TB
	root string
	dir  string
}

func (p *processes) script(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join(p.root, "scripts", "cluster.sh")}, args...)...)
	cmd.Env = append(os.Environ(), "CHIO_CLUSTER_DIR="+p.dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("cluster.sh %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

func (p *processes) kill(ctx context.Context, name string) {
	if _, err := p.script(ctx, "kill", name); err != nil {
		p.t.Fatal(err)
	}
}

func (p *processes) start(ctx context.Context, name string) {
	// cluster.sh start waits for readiness; the test does not need to.
	go func() { _, _ = p.script(context.WithoutCancel(ctx), "start", name) }()
}

func (p *processes) partition(context.Context, string) bool { return false }

// upstream follows scripts/cluster.sh's ports: edge-N on 127.0.0.1:1809N.
func (p *processes) upstream(edge string) string {
	return "127.0.0.1:1809" + strings.TrimPrefix(edge, "edge-")
}
func (p *processes) heal(context.Context, string) {}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

func TestComposeFailover(t *testing.T) {
	if os.Getenv("CHIO_CLUSTER_TEST") != "compose" {
		t.Skip("the compose failure test runs on demand: bash scripts/images.sh && CHIO_CLUSTER_TEST=compose go test -v ./deploy/clustertest (.ci/run does this)")
	}
	if err := engineAvailable(); err != nil {
		t.Skipf("no container engine for the compose failure test (%v); CHIO_CLUSTER_TEST=process runs the reduced version on local processes", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ft := sayingFailuresLast(t)
	c := startCompose(ctx, ft)
	failover(ctx, ft, c, filepath.Join(c.dir, "keys"))
}

// startCompose brings the compose cluster up from nothing, and takes it
// down at the end of the test (with its logs when the test failed). The
// cleanup is registered before up: a cluster that came up only in part is
// taken down too, so it holds no ports for the next run.
func startCompose(ctx context.Context, t testing.TB) *compose {
	t.Helper()
	c := &compose{t: t, root: repoRoot(t), dir: t.TempDir()}
	_, _ = c.dc(ctx, "down", "-v", "--remove-orphans")
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := c.dc(context.Background(), "logs", "--no-color", "--tail", "80")
			t.Logf("cluster logs (the proxy's health checks left out):\n%s", withoutHealthChecks(logs))
		}
		_, _ = c.dc(context.Background(), "down", "-v", "--remove-orphans")
	})
	if out, err := c.dc(ctx, "up", "-d"); err != nil {
		t.Fatal(err, out)
	}
	return c
}

// withoutHealthChecks drops the proxy's health-check lines from the
// cluster's logs: one a second per edge that is down, they would push
// everything else, the test's own failure included, out of a log tail.
func withoutHealthChecks(logs string) string {
	var b strings.Builder
	for line := range strings.Lines(logs) {
		if !strings.Contains(line, "health_checker") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// startProcesses brings scripts/cluster.sh's processes up, and takes them
// down at the end of the test, showing the tail of each named part's log
// when the test failed.
func startProcesses(ctx context.Context, t testing.TB, logged ...string) *processes {
	t.Helper()
	p := &processes{t: t, root: repoRoot(t), dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			for _, n := range logged {
				b, _ := os.ReadFile(filepath.Join(p.dir, "logs", n+".log"))
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s log (tail):\n%s", n, b)
			}
		}
		_, _ = p.script(context.Background(), "down")
	})
	if out, err := p.script(ctx, "up"); err != nil {
		t.Fatal(err, out)
	}
	return p
}

// TestProcessFailover is the reduced version for machines without a
// container engine: the topology of scripts/cluster.sh, with kills and
// restarts but no partitions.
func TestProcessFailover(t *testing.T) {
	if os.Getenv("CHIO_CLUSTER_TEST") != "process" {
		t.Skip("the process-level failure test runs on demand: CHIO_CLUSTER_TEST=process go test -v ./deploy/clustertest")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	ft := sayingFailuresLast(t)
	p := startProcesses(ctx, ft, "ledger-1", "ledger-2", "edge-1", "edge-2", "nats-2")
	failover(ctx, ft, p, filepath.Join(p.dir, "keys"))
}

// clock is how the failover test's log times faults and failures, so
// that one can be read against the other.
const clock = "15:04:05.000"

// awaitCluster waits until the proxy and both ledgers are ready and a
// ledger holds the writer lease. writer names the lease's holder ("" when
// none can be read), from a NATS connection the test closes at its end.
func awaitCluster(ctx context.Context, t testing.TB, keys string) (writer func() string) {
	t.Helper()
	proxy := &http.Client{Transport: proxyTransport(t, keys)}
	boot := waitUntil(ctx, t, "the cluster to be ready", 3*time.Minute, func() bool {
		return readyVia(ctx, proxy, proxyURL) && ready(ctx, ledgerURLs["ledger-1"]) && ready(ctx, ledgerURLs["ledger-2"])
	})
	t.Logf("cluster ready in %s", boot.Round(time.Millisecond))
	nc := dialAs(t, keys, natsauth.Operator, nats.MaxReconnects(-1))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	writer = func() string {
		// Each look bounded on its own: a JetStream request takes its
		// deadline from the context, and a reply lost while the cluster
		// heals must not hold the test until the whole run's deadline.
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		kv, err := js.KeyValue(ctx, lease.DefaultBucket)
		if err != nil {
			return ""
		}
		e, err := kv.Get(ctx, lease.DefaultKey)
		if err != nil {
			return ""
		}
		var rec struct {
			Holder string `json:"holder"`
		}
		_ = json.Unmarshal(e.Value(), &rec)
		return rec.Holder
	}
	waitUntil(ctx, t, "a ledger to hold the writer lease", time.Minute, func() bool { return ledgerURLs[writer()] != "" })
	return writer
}

// proxyClient is an a2a-go JSON-RPC client of the cluster's proxy,
// sending through rt.
func proxyClient(ctx context.Context, t testing.TB, rt http.RoundTripper, timeout time.Duration) *a2aclient.Client {
	t.Helper()
	client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(proxyURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: rt, Timeout: timeout}))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// pace runs workers goroutines, each making the call newWorker gives it
// (made here, in order) at the ticks of one ticker that offers rate calls
// a second over all of them, until ctx ends; wait waits for them to end.
func pace(ctx context.Context, workers, rate int, newWorker func() func()) (wait func()) {
	tick := time.NewTicker(time.Second / time.Duration(rate))
	var wg sync.WaitGroup
	for range workers {
		call := newWorker()
		wg.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				call()
			}
		})
	}
	return func() { wg.Wait(); tick.Stop() }
}

// failover loads the cluster through the proxy while it breaks it, then
// checks the log against what the client saw.
func failover(ctx context.Context, t testing.TB, topo topology, keys string) {
	writer := awaitCluster(ctx, t, keys)
	checkSealed(t, keys)
	pt := proxyTransport(t, keys)
	checkProxyTLS(ctx, t, pt)
	checkForgedEvents(ctx, t, keys, ledgerURLs[writer()])
	root := repoRoot(t)
	// The README's first look at the cluster: the card through the proxy.
	if status, body, err := getVia(ctx, &http.Client{Transport: pt}, anonymous, proxyURL+"/.well-known/agent-card.json"); err != nil || status != http.StatusOK || !strings.Contains(string(body), `"hello_task"`) {
		t.Fatalf("agent card through the proxy: %d %v %.200s", status, err, body)
	}

	token := issueCapability(t, keys)
	reads := serviceToken()
	kernelPub := readKey(t, keys, "kernel.pub")
	vkey := readKey(t, keys, "checkpoint.vkey")

	// The load: paced calls through the proxy, a few workers, each with its
	// own a2a-go client so the edge that answered is known per call.
	const workers, rate = 12, 100 // calls/s offered overall
	var (
		mu    sync.Mutex
		calls []call
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	growth := watchGrowth(ctx, t, vkey)
	waitLoad := pace(loadCtx, workers, rate, func() func() {
		rec := &upstreamRecorder{token: token, base: pt}
		client := proxyClient(ctx, t, rec, 15*time.Second)
		return func() {
			msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("failover"))
			cctx, ccancel := context.WithTimeout(loadCtx, 15*time.Second)
			res, err := client.SendMessage(cctx, &a2apb.SendMessageRequest{Message: msg})
			ccancel()
			cl := call{at: time.Now()}
			switch task, ok := res.(*a2apb.Task); {
			case err != nil:
				cl.failure = err.Error()
			case !ok:
				cl.failure = fmt.Sprintf("answered with a %T", res)
			case task.Status.State != a2apb.TaskStateCompleted:
				cl.failure = "task " + string(task.Status.State)
				if task.Status.Message != nil && len(task.Status.Message.Parts) > 0 {
					b, _ := json.Marshal(task.Status.Message.Parts[0])
					cl.failure += ": " + string(b)
				}
			}
			if task, ok := res.(*a2apb.Task); err == nil && ok && task.Status.State == a2apb.TaskStateCompleted {
				chio, _ := task.Metadata["chio"].(map[string]any)
				cl.receipt, _ = chio["receiptId"].(string)
				cl.ok, cl.taskID = cl.receipt != "", string(task.ID)
				cl.upstream, _ = rec.last.Load().(string)
			}
			mu.Lock()
			calls = append(calls, cl)
			mu.Unlock()
		}
	})
	succeededSince := func(since time.Time) bool {
		mu.Lock()
		defer mu.Unlock()
		for i := len(calls) - 1; i >= 0 && calls[i].at.After(since); i-- {
			if calls[i].ok {
				return true
			}
		}
		return false
	}
	recoveries := map[string]time.Duration{}
	fault := func(name string, hold time.Duration, do, undo func()) {
		time.Sleep(6 * time.Second)
		start := time.Now()
		do()
		if hold > 0 {
			time.Sleep(hold)
			undo()
		}
		t.Logf("fault %-28s at %s", name, start.Format(clock))
		healed := time.Now()
		recoveries[name] = waitUntil(ctx, t, "a successful call after: "+name, 2*time.Minute, func() bool { return succeededSince(healed) }) + healed.Sub(start) - hold
		t.Logf("fault %-28s service back %s after it was restored", name, recoveries[name].Round(time.Millisecond))
	}

	kills, partitions := 0, 0
	fault("kill and restart nats-2", 6*time.Second,
		func() { topo.kill(ctx, "nats-2"); kills++ },
		func() { topo.start(ctx, "nats-2") })
	if topo.partition(ctx, "nats-3") {
		partitions++
		fault("partition nats-3", 8*time.Second, func() {}, func() { topo.heal(ctx, "nats-3") })
	} else {
		t.Log("this topology cannot partition a node (local processes); skipping the partition")
	}
	var edgeKilled time.Time
	fault("kill edge-1", 0, func() { topo.kill(ctx, "edge-1"); kills++; edgeKilled = time.Now() }, nil)

	// Checkpoint seen before the ledger fails over, from the writer. The
	// faults above may have moved the lease, and a writer that lost JetStream
	// hands it back: wait until one holds it again.
	waitUntil(ctx, t, "a ledger to hold the writer lease after the faults", time.Minute, func() bool { return ledgerURLs[writer()] != "" })
	old := writer()
	// A ledger that has just taken the lease, or could not read the head
	// it published while NATS was broken, serves no checkpoint until it
	// has (503 log_not_serving): wait for one rather than take one look.
	var before *tlog.Checkpoint
	waitUntil(ctx, t, "a checkpoint from the writer after the faults", time.Minute, func() bool {
		if old = writer(); ledgerURLs[old] == "" {
			return false
		}
		before, _ = checkpointRaw(ctx, t, ledgerURLs[old], vkey)
		return before != nil && writer() == old // still the writer once it served
	})
	killedAt := time.Now()
	topo.kill(ctx, old)
	kills++
	takeover := waitUntil(ctx, t, "the standby to take the writer lease", time.Minute, func() bool {
		w := writer()
		return w != "" && w != old
	})
	next := writer()
	t.Logf("fault %-28s %s holds the lease %s after %s was killed", "kill the active ledger", next, takeover.Round(time.Millisecond), old)
	recoveries["ledger takeover"] = takeover
	waitUntil(ctx, t, "a successful call after the ledger failover", 2*time.Minute, func() bool { return succeededSince(killedAt.Add(takeover)) })
	time.Sleep(4 * time.Second)
	topo.start(ctx, old) // back as the standby
	time.Sleep(4 * time.Second)
	stopLoad()
	waitLoad()

	// Every call the client saw succeed has its receipt, exactly once.
	mu.Lock()
	var ok []call
	for _, cl := range calls {
		if cl.ok {
			ok = append(ok, cl)
		}
	}
	total := len(calls)
	type span struct {
		n           int
		first, last time.Time
	}
	reasons := map[string]*span{}
	for _, cl := range calls {
		if !cl.ok {
			// Task ids made every reason unique: group by the rest.
			r := uuidPattern.ReplaceAllString(cl.failure, "<id>")
			if len(r) > 240 {
				r = r[:240]
			}
			sp := reasons[r]
			if sp == nil {
				sp = &span{first: cl.at}
				reasons[r] = sp
			}
			sp.n++
			sp.last = cl.at
		}
	}
	mu.Unlock()
	for r, sp := range reasons {
		t.Logf("failed calls: %4d × %s (from %s to %s)", sp.n, r, sp.first.Format(clock), sp.last.Format(clock))
		if strings.Contains(r, "429") {
			// One principal with a handful of live tasks is never over its
			// quota: a refusal means ended tasks were counted.
			t.Errorf("%d calls refused as over a quota (%s)", sp.n, r)
		}
	}
	if len(ok) < total/2 {
		t.Fatalf("only %d of %d calls succeeded", len(ok), total)
	}
	api := ledgerURLs[next]
	waitUntil(ctx, t, "every successful call's receipt in the log", 3*time.Minute, func() bool {
		st, _, err := get(ctx, reads, api+"/v1/receipts/"+ok[len(ok)-1].receipt)
		return err == nil && st == http.StatusOK
	})
	// Receipts are private: the same read without a credential is refused.
	if st, body, err := get(ctx, anonymous, api+"/v1/receipts/"+ok[len(ok)-1].receipt); err != nil || st != http.StatusUnauthorized {
		t.Fatalf("anonymous receipt read from %s: %d %v %.200s, want 401", api, st, err, body)
	}
	// The log is quiet once its checkpoint stops moving.
	var after *tlog.Checkpoint
	var afterNote []byte
	waitUntil(ctx, t, "the log to settle", 2*time.Minute, func() bool {
		cp, raw := checkpointRaw(ctx, t, api, vkey)
		if cp == nil { // not answering for now (a 503 while it catches up)
			time.Sleep(time.Second)
			return false
		}
		settled := after != nil && cp.Size == after.Size
		after, afterNote = cp, raw
		if !settled {
			time.Sleep(2 * time.Second)
		}
		return settled
	})
	grown := growth()
	leaves := readLeaves(ctx, t, api, reads, after.Size)
	seen := map[string]int{}
	leafOf := map[string]int{}
	verdictOf := map[string]schemas.Verdict{}
	for i, l := range leaves {
		var head struct {
			ID       string `json:"id"`
			Decision struct {
				Verdict schemas.Verdict `json:"verdict"`
			} `json:"decision"`
		}
		if err := json.Unmarshal(l, &head); err != nil {
			t.Fatalf("leaf: %v", err)
		}
		seen[head.ID]++
		leafOf[head.ID], verdictOf[head.ID] = i, head.Decision.Verdict
	}
	// The stated bound, under every fault: an answered call's receipt is in
	// the log within the lag bound, or, when its outcome never came (the
	// receipt says incomplete), within the incomplete timeout and the lag
	// bound (docs/operations.md, "The bound on a receipt").
	var (
		lags       []time.Duration
		lagMax     time.Duration
		lagMaxAt   time.Time
		inTakeover int // answered while no ledger appended
	)
	for _, cl := range ok {
		i, in := leafOf[cl.receipt]
		if !in {
			continue // counted as missing below
		}
		at, seenGrow := grown(uint64(i) + 1)
		if !seenGrow {
			t.Errorf("receipt %s (leaf %d): no checkpoint was seen to include it", cl.receipt, i)
			continue
		}
		lag := max(at.Sub(cl.at), 0)
		lags = append(lags, lag)
		if cl.at.After(killedAt) && cl.at.Before(killedAt.Add(takeover)) {
			inTakeover++
		}
		if lag >= lagMax {
			lagMax, lagMaxAt = lag, cl.at
		}
		bound := ledger.DefaultLagBound
		if verdictOf[cl.receipt] == schemas.VerdictIncomplete {
			bound += 10 * time.Minute
		}
		if lag > bound {
			t.Errorf("call %s answered at %s: its receipt (leaf %d, %s) was in the log %s later, over the bound %s",
				cl.receipt, cl.at.Format(clock), i, verdictOf[cl.receipt], lag.Round(time.Millisecond), bound)
		}
	}
	slices.Sort(lags)
	var lagP99 time.Duration
	if len(lags) > 0 {
		lagP99 = lags[len(lags)*99/100]
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("receipt %s appears %d times in the log", id, n)
		}
	}
	missing := 0
	for _, cl := range ok {
		if seen[cl.receipt] != 1 {
			missing++
			t.Errorf("call %s (task %s) succeeded but has %d receipts", cl.receipt, cl.taskID, seen[cl.receipt])
		}
	}
	// Every receipt verifies offline: signature, inclusion in the final
	// checkpoint; and the final checkpoint is consistent with the one seen
	// before the failover.
	verified := 0
	for _, cl := range ok {
		_, r, err := get(ctx, reads, api+"/v1/receipts/"+cl.receipt)
		if err != nil {
			t.Fatal(err)
		}
		_, p, err := get(ctx, reads, fmt.Sprintf("%s/v1/receipts/%s/inclusion-proof?tree_size=%d", api, cl.receipt, after.Size))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := verify.Verify(verify.Inputs{Receipt: r, Proof: p, Checkpoint: afterNote, VKey: vkey, KernelKey: kernelPub}); err != nil {
			t.Errorf("receipt %s: %v", cl.receipt, err)
			continue
		}
		verified++
	}
	checkConsistency(ctx, t, api, before, after)

	// Both ledger instances hold the same log.
	other := "ledger-1"
	if next == other {
		other = "ledger-2"
	}
	waitUntil(ctx, t, "the restarted ledger to follow up to the log's size", 2*time.Minute, func() bool {
		cp, _ := checkpointRaw(ctx, t, ledgerURLs[other], vkey)
		return cp != nil && cp.Size >= after.Size
	})
	checkConsistency(ctx, t, ledgerURLs[other], after, after) // same root at the same size

	// Tasks created on the killed edge are readable through the other.
	readable, onKilled := 0, 0
	reader := proxyClient(ctx, t, &upstreamRecorder{token: token, base: pt}, 15*time.Second)
	for _, cl := range ok {
		if cl.upstream != topo.upstream("edge-1") || !cl.at.Before(edgeKilled) {
			continue
		}
		onKilled++
		task, err := reader.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(cl.taskID)})
		if err != nil {
			// One more try: a read may time out while the cluster settles
			// from the faults; a task that is not readable fails twice.
			time.Sleep(time.Second)
			task, err = reader.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(cl.taskID)})
		}
		if err != nil || task.Status.State != a2apb.TaskStateCompleted {
			t.Errorf("task %s from the killed edge: %v", cl.taskID, err)
			continue
		}
		readable++
	}
	if onKilled == 0 {
		t.Error("no successful call went to edge-1 before it was killed (is Caddy sending X-Chio-Upstream?)")
	}

	// A rebuild from the stream reproduces the root.
	size, rebuilt := rebuild(ctx, t, root, keys)
	if size != after.Size || !bytes.Equal(rebuilt, after.Hash) {
		t.Errorf("rebuild: size %d root %x; log: size %d root %x", size, rebuilt, after.Size, after.Hash)
	}

	names := make([]string, 0, len(recoveries))
	for n := range recoveries {
		names = append(names, n)
	}
	sort.Strings(names)
	var rec []string
	for _, n := range names {
		rec = append(rec, fmt.Sprintf("%s %s", n, recoveries[n].Round(time.Millisecond)))
	}
	t.Logf("calls %d, succeeded %d, receipts in log %d, verified %d, missing %d, duplicated 0 (checked), answered to in the log p99 %s max %s (answered at %s; %d answered during the ledger takeover; bound %s), tasks from killed edge readable %d/%d, kills %d (nats-2, edge-1, %s), partitions %d (nats-3), log size %d (rebuild equal: %v); recovery: %s",
		total, len(ok), len(leaves), verified, missing, lagP99.Round(time.Millisecond), lagMax.Round(time.Millisecond), lagMaxAt.Format(clock), inTakeover, ledger.DefaultLagBound,
		readable, onKilled, kills, old, partitions, after.Size, size == after.Size && bytes.Equal(rebuilt, after.Hash), strings.Join(rec, ", "))
}

// watchGrowth samples both ledgers' checkpoints every 250 ms, until the
// returned stop is called; stop returns when a size was first seen: the
// time of the first sample at which either ledger served a checkpoint
// of at least that size (false if none did).
func watchGrowth(ctx context.Context, t testing.TB, vkey string) (stop func() func(size uint64) (time.Time, bool)) {
	type sample struct {
		at   time.Time
		size uint64
	}
	var samples []sample // sizes strictly increasing
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	size := func(ctx context.Context, api string) uint64 {
		status, raw, err := get(ctx, anonymous, api+"/log/checkpoint")
		if err != nil || status != http.StatusOK {
			return 0
		}
		cp, _, _, err := tlog.ParseCheckpoint(raw, v.Name(), v)
		if err != nil {
			return 0 // checked where the test reads the log
		}
		return cp.Size
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(250 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, u := range ledgerURLs {
				// Each look timed on its own: a slow answer from one
				// ledger does not delay what the other showed.
				cctx, ccancel := context.WithTimeout(wctx, 2*time.Second)
				n := size(cctx, u)
				ccancel()
				if len(samples) == 0 || n > samples[len(samples)-1].size {
					samples = append(samples, sample{time.Now(), n})
				}
			}
			select {
			case <-wctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() func(uint64) (time.Time, bool) {
		cancel()
		<-done
		return func(size uint64) (time.Time, bool) {
			i := sort.Search(len(samples), func(i int) bool { return samples[i].size >= size })
			if i == len(samples) {
				return time.Time{}, false
			}
			return samples[i].at, true
		}
	}
}

func readKey(t testing.TB, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// issueCapability mints a caller's capability for the hello tool with the
// cluster's issuer key, as `chio capability issue` does.
func issueCapability(t testing.TB, keys string) string {
	t.Helper()
	issuer, err := schemas.ParsePrivateKey(readKey(t, keys, "issuer.key"))
	if err != nil {
		t.Fatal(err)
	}
	agentPub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: "cap-failover", Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject:  schemas.EncodePublicKey(agentPub),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func checkpointRaw(ctx context.Context, t testing.TB, api, vkey string) (*tlog.Checkpoint, []byte) {
	t.Helper()
	status, raw, err := get(ctx, anonymous, api+"/log/checkpoint")
	if err != nil || status != http.StatusOK {
		return nil, nil
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	cp, _, _, err := tlog.ParseCheckpoint(raw, v.Name(), v)
	if err != nil {
		t.Fatalf("checkpoint from %s: %v", api, err)
	}
	return cp, raw
}

func checkConsistency(ctx context.Context, t testing.TB, api string, from, to *tlog.Checkpoint) {
	t.Helper()
	status, body, err := get(ctx, anonymous, fmt.Sprintf("%s/v1/log/consistency-proof?from=%d&to=%d", api, from.Size, to.Size))
	if err != nil || status != http.StatusOK {
		t.Fatalf("consistency %d→%d from %s: %d %s %v", from.Size, to.Size, api, status, body, err)
	}
	var p struct {
		Proof []string `json:"proof"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	hashes := make([][]byte, len(p.Proof))
	for i, s := range p.Proof {
		if hashes[i], err = schemas.ParseHash(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, from.Size, to.Size, hashes, from.Hash, to.Hash); err != nil {
		t.Fatalf("checkpoints %d and %d (from %s) are not consistent: %v", from.Size, to.Size, api, err)
	}
}

// readLeaves reads every entry of the tree of the given size from the C2SP
// entry bundles, with token (they hold every receipt: a whole-log reader's
// credential): each entry is a big-endian uint16 length and its bytes.
func readLeaves(ctx context.Context, t testing.TB, api, token string, size uint64) [][]byte {
	t.Helper()
	var out [][]byte
	for n := uint64(0); n*256 < size; n++ {
		path := tileIndexPath(n)
		if rest := size - n*256; rest < 256 {
			path += fmt.Sprintf(".p/%d", rest)
		}
		status, b, err := get(ctx, token, api+"/log/tile/entries/"+path)
		if err != nil || status != http.StatusOK {
			t.Fatalf("entry bundle %s: %d %v", path, status, err)
		}
		for len(b) > 0 {
			if len(b) < 2 {
				t.Fatalf("entry bundle %s: truncated", path)
			}
			l := int(b[0])<<8 | int(b[1])
			if len(b) < 2+l {
				t.Fatalf("entry bundle %s: truncated entry", path)
			}
			out = append(out, b[2:2+l])
			b = b[2+l:]
		}
	}
	if uint64(len(out)) != size {
		t.Fatalf("read %d leaves, want %d", len(out), size)
	}
	return out
}

// tileIndexPath encodes a tile index as C2SP path elements: groups of three
// digits, all but the last prefixed with x.
func tileIndexPath(n uint64) string {
	s := fmt.Sprintf("%03d", n%1000)
	for n /= 1000; n > 0; n /= 1000 {
		s = fmt.Sprintf("x%03d/%s", n%1000, s)
	}
	return s
}

// rebuild runs `chio ledger rebuild` against the cluster's stream.
func rebuild(ctx context.Context, t testing.TB, root, keys string) (uint64, []byte) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "chio")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/chio")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build chio: %v\n%s", err, out)
	}
	// Stdout only: progress lines go to stderr.
	cmd := exec.CommandContext(ctx, bin, "ledger", "rebuild", "--nats", natsURL, "--nats-nkey", filepath.Join(keys, "nats", "reader.nk"),
		"--nats-tls-ca", filepath.Join(keys, "nats", natsauth.CAFile), "--edge-issuer", filepath.Join(keys, "issuer.pub"), "--data-dir", t.TempDir(), "--keys", keys)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chio ledger rebuild: %v\n%s%s", err, out, stderr.Bytes())
	}
	var size uint64
	var rootBase64, rootHex string
	if _, err := fmt.Sscanf(string(out), "size %d\nroot %s\nroot-hex %s", &size, &rootBase64, &rootHex); err != nil {
		t.Fatalf("rebuild output %q: %v", out, err)
	}
	h, err := schemas.ParseHash(rootHex)
	if err != nil {
		t.Fatal(err)
	}
	return size, h
}
