package main

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natstest"
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
		role natsauth.Role
		do   natstest.Action
	}{
		{natsauth.Edge, natstest.Action{Pub: "$KV." + schemas.RevocationsBucket + "." + schemas.KVKey("cap-A")}},
		{natsauth.Edge, natstest.Action{Pub: "$JS.API.STREAM.PURGE.KV_" + schemas.RevocationsBucket}},
		{natsauth.Edge, natstest.Action{Pub: "$JS.API.STREAM.UPDATE." + schemas.EventsStream}},
		{natsauth.Edge, natstest.Action{Sub: "chio.tools.*.invoke"}},
		{natsauth.Edge, natstest.Action{Sub: "chio.events.>"}},
		{natsauth.Worker, natstest.Action{Sub: "chio.events.>"}},
		{natsauth.Worker, natstest.Action{Pub: "chio.tools.x.invoke"}},
		{natsauth.Projections, natstest.Action{Pub: schemas.ReceiptSubject("hello")}},
		{natsauth.Projections, natstest.Action{Pub: schemas.SubjectDecision}},
		{natsauth.Reader, natstest.Action{Pub: schemas.SubjectOutcome}},
	} {
		nc := dialUp(t, up.natsURL, up.dir, c.role)
		refused := natstest.NewRefusals()
		nc.SetErrorHandler(refused.Handler)
		refused.ExpectRefused(t, nc, string(c.role), c.do)
		nc.Close()
	}
}
