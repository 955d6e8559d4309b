package clustertest

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/internal/natsauth"
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
		role     natsauth.Role
		pub, sub string
	}{
		{natsauth.Edge, "$KV." + schemas.RevocationsBucket + "." + schemas.KVKey("cap-A"), ""},
		{natsauth.Edge, "$JS.API.STREAM.PURGE.KV_" + schemas.RevocationsBucket, ""},
		{natsauth.Worker, "", "chio.events.>"},
		{natsauth.Projections, schemas.ReceiptSubject("hello"), ""},
		{natsauth.Operator, schemas.SubjectDecision, ""},
	} {
		refused := make(chan error, 4)
		nc := dialAs(t, keys, c.role, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				refused <- err
			}
		}))
		subject := c.pub
		if c.pub != "" {
			if err := nc.Publish(c.pub, []byte(`{}`)); err != nil {
				t.Fatal(err)
			}
		} else {
			subject = c.sub
			if _, err := nc.SubscribeSync(c.sub); err != nil {
				t.Fatal(err)
			}
		}
		_ = nc.Flush()
		select {
		case err := <-refused:
			if !strings.Contains(err.Error(), subject) {
				t.Errorf("%s on %s: refused %v", c.role, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("the cluster's NATS let the %s credential at %s", c.role, subject)
		}
		nc.Close()
	}
	t.Log("NATS sealed: no anonymous or unverified clients, and each credential refused outside its role")
}
