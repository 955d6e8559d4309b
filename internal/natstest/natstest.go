// Package natstest starts a real embedded NATS JetStream server for a test
// and connects to it, cleaning both up when the test ends.
package natstest

import (
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsembed"
)

// Start runs a server (in-process connections only, SyncAlways) in a
// temporary directory and returns it with one connection and its JetStream.
func Start(t testing.TB) (*natsembed.Server, *nats.Conn, jetstream.JetStream) {
	t.Helper()
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(t.TempDir(), "nats"), DontListen: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	nc, js := Connect(t, ns)
	return ns, nc, js
}

// Connect opens another connection to ns, closed when the test ends.
func Connect(t testing.TB, ns *natsembed.Server) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := ns.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Dial connects to a server at url (a cluster node a test started), with
// opts; the connection is closed when the test ends.
func Dial(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}
