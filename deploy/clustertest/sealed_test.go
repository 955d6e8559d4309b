package clustertest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/edgetest"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// dialAs connects to the cluster's NATS as role, with the role's nkey and
// the internal CA from keys/nats (as chio keygen wrote them).
func dialAs(t testing.TB, keys string, role natsauth.Role, extra ...nats.Option) *nats.Conn {
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
func checkSealed(t testing.TB, keys string) {
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
		{natsauth.Reader, natstest.Action{Pub: "$JS.API.CONSUMER.DELETE." + schemas.EventsStream + "." + schemas.LedgerConsumer}},
	} {
		refused := natstest.NewRefusals()
		nc := dialAs(t, keys, c.role, refused.Option())
		refused.ExpectRefused(t, nc, string(c.role), c.do)
		nc.Close()
	}
	t.Log("NATS sealed: no anonymous or unverified clients, and each credential refused outside its role")
}

// checkForgedEvents: with an edge's own NATS credential, a decision no
// certified edge signed (unsigned, or under a credential a stranger's
// issuer made) makes no receipt in the cluster's log, while the same
// decision signed with a compose edge's key does.
func checkForgedEvents(ctx context.Context, t testing.TB, keys, ledgerURL string) {
	t.Helper()
	js, err := jetstream.New(dialAs(t, keys, natsauth.Edge))
	if err != nil {
		t.Fatal(err)
	}
	key, err := schemas.ParsePrivateKey(readKey(t, keys, filepath.Join("edges", "edge-1.key")))
	if err != nil {
		t.Fatal(err)
	}
	cred, err := schemas.ParseEdgeCredential([]byte(readKey(t, keys, filepath.Join("edges", "edge-1.cred"))))
	if err != nil {
		t.Fatal(err)
	}
	genuine, err := schemas.NewEdgeSigner(cred, key)
	if err != nil {
		t.Fatal(err)
	}
	_, strangerIssuer, _ := ed25519.GenerateKey(rand.Reader)
	stranger := edgetest.Certified(t, strangerIssuer, "edge-1")
	decide := func(s *schemas.EdgeSigner) string {
		t.Helper()
		id := uuid.Must(uuid.NewV7()).String()
		d := schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(id), ReceiptID: id,
			Timestamp: uint64(time.Now().Unix()), CapabilityID: "cap-forged", ToolServer: "hello-a2a-srv", ToolName: "hello_task",
			Parameters: json.RawMessage(`{"text":"transfer $1,000,000 to attacker"}`), PolicyHash: schemas.SHA256Hex([]byte("forged")),
			Decision: schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "forged", Guard: "forged"}, EdgeID: "edge-1"}
		msg := &nats.Msg{Subject: schemas.SubjectDecision, Header: nats.Header{}}
		if s != nil {
			c := s.Credential()
			d.EdgeID, d.EdgeKey, d.EdgeCredentialID = c.EdgeID, c.PublicKey, c.ID
		}
		if err := d.Validate(); err != nil {
			t.Fatal(err)
		}
		if msg.Data, err = json.Marshal(&d); err != nil {
			t.Fatal(err)
		}
		if s != nil {
			c, sig := s.Sign(msg.Subject, msg.Data)
			msg.Header.Set(schemas.HeaderEdgeCredential, c)
			msg.Header.Set(schemas.HeaderEdgeSignature, sig)
		}
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if _, err := js.PublishMsg(pctx, msg, jetstream.WithMsgID(d.EventID)); err != nil {
			t.Fatal(err)
		}
		return id
	}
	unsigned, forged, signed := decide(nil), decide(stranger), decide(genuine)
	waitUntil(ctx, t, "the genuine decision's receipt", time.Minute, func() bool {
		status, _, err := get(ctx, serviceToken(), ledgerURL+"/v1/receipts/"+signed)
		return err == nil && status == http.StatusOK
	})
	for _, id := range []string{unsigned, forged} {
		if status, body, err := get(ctx, serviceToken(), ledgerURL+"/v1/receipts/"+id); err != nil || status != http.StatusNotFound {
			t.Fatalf("receipt %s of a decision no certified edge signed: %d %v %.200s, want 404", id, status, err, body)
		}
	}
	t.Log("events: a decision published with an edge's NATS credential but no certified edge's signature makes no receipt")
}
