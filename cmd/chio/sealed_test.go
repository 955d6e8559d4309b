package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
)

// TestUpNATSIsSealed: chio up's NATS refuses a client with no credential,
// and the forgeries an attacker with a shell tried are refused by
// permissions: un-revoking with an edge's credential, eavesdropping on
// every tenant's events or worker calls, answering a worker's calls from
// an edge, minting receipts with the projections' credential.
func TestUpNATSIsSealed(t *testing.T) {
	up := startUp(t)
	if nc, err := nats.Connect(up.natsURL); err == nil {
		nc.Close()
		t.Fatal("chio up's NATS took a client with no credential")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("no credential: %v, want an authorization violation", err)
	}
	// The revocation is real: the operator writes it, as chio capability revoke does.
	if out, err := chio(context.Background(), "capability", "revoke", "cap-A", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Operator)); err != nil {
		t.Fatalf("revoke as the operator: %v %s", err, out)
	}
	if _, err := chio(context.Background(), "capability", "revoke", "cap-B", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge)); err == nil ||
		!strings.Contains(err.Error(), "operator role") {
		t.Fatalf("revoke with an edge's credential: %v, want a refusal naming the role", err)
	}
	for _, c := range []struct {
		role     natsauth.Role
		pub, sub string
	}{
		{role: natsauth.Edge, pub: "$KV." + schemas.RevocationsBucket + "." + schemas.KVKey("cap-A")},
		{role: natsauth.Edge, pub: "$JS.API.STREAM.PURGE.KV_" + schemas.RevocationsBucket},
		{role: natsauth.Edge, pub: "$JS.API.STREAM.UPDATE." + schemas.EventsStream},
		{role: natsauth.Edge, sub: "chio.tools.*.invoke"},
		{role: natsauth.Edge, sub: "chio.events.>"},
		{role: natsauth.Worker, sub: "chio.events.>"},
		{role: natsauth.Worker, pub: "chio.tools.x.invoke"},
		{role: natsauth.Projections, pub: schemas.ReceiptSubject("hello")},
		{role: natsauth.Projections, pub: schemas.SubjectDecision},
		{role: natsauth.Reader, pub: schemas.SubjectOutcome},
	} {
		nc := dialUp(t, up.natsURL, up.dir, c.role)
		refused := make(chan error, 4)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				refused <- err
			}
		})
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
				t.Errorf("%s at %s: refused %v", c.role, subject, err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s's credential was let at %s", c.role, subject)
		}
		nc.Close()
	}
}
