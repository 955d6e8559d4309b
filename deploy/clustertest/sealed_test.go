package clustertest

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// dialAs connects to the cluster's NATS as role, with the role's nkey and
// the internal CA from keys/nats (as chio keygen wrote them).
func dialAs(t *testing.T, keys string, role natsauth.Role, extra ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := dialRole(keys, role, extra...)
	if err != nil {
		t.Fatalf("connect to NATS as %s: %v", role, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func dialRole(keys string, role natsauth.Role, extra ...nats.Option) (*nats.Conn, error) {
	c := natsauth.Client{Nkey: filepath.Join(keys, "nats", natsauth.SeedFile(role)), TLSCA: filepath.Join(keys, "nats", natsauth.CAFile)}
	opts, err := c.Options(role)
	if err != nil {
		return nil, err
	}
	return nats.Connect(natsURL, append(opts, extra...)...)
}

// checkSealed: the cluster's NATS refuses a client with no credential,
// and one without TLS; a credential used outside its role is refused by
// permissions (an edge un-revoking, a worker reading every tenant's
// events, a projections credential minting a receipt).
func checkSealed(t *testing.T, keys string) {
	t.Helper()
	ca := nats.RootCAs(filepath.Join(keys, "nats", natsauth.CAFile))
	if nc, err := nats.Connect(natsURL, ca); err == nil {
		nc.Close()
		t.Fatal("the cluster's NATS accepted a client with no credential")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("a client with no credential: %v, want an authorization violation", err)
	}
	seed := filepath.Join(keys, "nats", natsauth.SeedFile(natsauth.Edge))
	plain, err := nats.NkeyOptionFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	// No CA given: the client cannot verify the server's certificate, and
	// the server takes no plain-text client.
	if nc, err := nats.Connect(natsURL, plain); err == nil {
		nc.Close()
		t.Fatal("the cluster's NATS took a client that does not verify its TLS certificate")
	}
	for _, c := range []struct {
		role natsauth.Role
		do   natstest.Action
	}{
		{natsauth.Edge, natstest.Action{Pub: "$KV." + schemas.RevocationsBucket + "." + schemas.KVKey("cap-A")}},
		{natsauth.Edge, natstest.Action{Pub: "$JS.API.STREAM.PURGE.KV_" + schemas.RevocationsBucket}},
		{natsauth.Worker, natstest.Action{Sub: "chio.events.>"}},
		{natsauth.Projections, natstest.Action{Pub: schemas.ReceiptSubject("hello")}},
		{natsauth.Operator, natstest.Action{Pub: schemas.SubjectDecision}},
	} {
		refused := natstest.NewRefusals()
		nc := dialAs(t, keys, c.role, refused.Option())
		refused.ExpectRefused(t, nc, string(c.role), c.do)
		nc.Close()
	}
	t.Log("NATS sealed: no anonymous or unverified clients, and each credential refused outside its role")
}
