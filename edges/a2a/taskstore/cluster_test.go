package taskstore

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natstest"
)

// freePort returns a loopback TCP port free at the time of asking.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster runs a three-node JetStream cluster on loopback.
func startCluster(t *testing.T) []*natsserver.Server {
	t.Helper()
	ports := []int{freePort(t), freePort(t), freePort(t)}
	var routes []*url.URL
	for _, p := range ports {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var nodes []*natsserver.Server
	for i, p := range ports {
		opts := &natsserver.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
			JetStream: true, StoreDir: filepath.Join(t.TempDir(), "js"),
			Cluster: natsserver.ClusterOpts{Name: "chio-test", Host: "127.0.0.1", Port: p},
			Routes:  routes,
		}
		ns, err := natsserver.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		go ns.Start()
		t.Cleanup(ns.Shutdown)
		nodes = append(nodes, ns)
	}
	for _, ns := range nodes {
		if !ns.ReadyForConnections(30 * time.Second) {
			t.Fatal("cluster node not ready")
		}
	}
	// JetStream answers once the nodes have elected a meta leader, and
	// places an R3 stream once that leader has current stats from every
	// node (before, a create fails: "no suitable peers for placement").
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		ready := false
		for _, ns := range nodes {
			ready = ready || ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) == len(nodes)
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader with every peer online within a minute")
		}
	}
	return nodes
}

// A read while the task stream has no leader (the leader's node just
// died) waits for the election instead of failing the call: the request
// to the old leader goes unanswered, and is asked again.
func TestReadAcrossALeaderElection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	nodes := startCluster(t)
	var urls []string
	for _, ns := range nodes {
		urls = append(urls, ns.ClientURL())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(u string) jetstream.JetStream {
		_, js := natstest.Dial(t, u, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		return js
	}
	var s *Store
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		s, err = Open(octx, connect(urls[0]), WithReplicas(3))
		ocancel()
		if err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("open on a three-node cluster: %v", err)
		}
	}
	task, err := s.Create(ctx, alice, "", msg("hi"), []byte(`{"tool":"echo"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.stream.Info(ctx)
	if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream info: %+v %v", info, err)
	}
	// A reader connected to a node that is not the leader, then the
	// leader's node goes away.
	var reader *Store
	for _, ns := range nodes {
		if ns.Name() == info.Cluster.Leader {
			continue
		}
		if reader, err = Open(ctx, connect(ns.ClientURL()), WithReplicas(3)); err != nil {
			t.Fatal(err)
		}
		break
	}
	for _, ns := range nodes {
		if ns.Name() == info.Cluster.Leader {
			ns.Shutdown()
		}
	}
	// No deadline of the caller's own: the store's default (the
	// JetStream client's timeout) bounds the read, as for a handler.
	got, err := reader.Load(context.Background(), task.ID, alice)
	if err != nil {
		t.Fatalf("read right after the leader's node died: %v", err)
	}
	if got.ID != task.ID {
		t.Fatalf("read %s, want %s", got.ID, task.ID)
	}
}
