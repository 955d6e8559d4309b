package natsauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/a2a/push"
	"github.com/chio-ledger/chio/edges/a2aadapter"
	"github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/ledger/lease"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/projections"
	"github.com/chio-ledger/chio/schemas"
)

// startServer starts an embedded server that accepts only the roles'
// credentials, as chio up runs it, and sets up the streams and buckets
// the way the parts do.
func startServer(t *testing.T) (*natsembed.Server, *natsauth.Credentials) {
	t.Helper()
	dir := t.TempDir()
	creds, err := natsauth.LoadOrCreate(filepath.Join(dir, "creds"))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := natsembed.Start(natsembed.Config{StoreDir: filepath.Join(dir, "nats"), Port: -1, Users: creds.Users(), WatchEvery: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	ctx := context.Background()
	_, js := connect(t, ns, creds, natsauth.Operator)
	for _, cfg := range []jetstream.StreamConfig{schemas.EventsStreamConfig(1), schemas.ReceiptsStreamConfig(1)} {
		if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, cfg := range []jetstream.KeyValueConfig{schemas.RevocationsConfig(1), schemas.BudgetsConfig(1)} {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	return ns, creds
}

// conn is a connection whose permission refusals are collected.
type conn struct {
	*nats.Conn
	refused natstest.Refusals
}

func connect(t *testing.T, ns *natsembed.Server, creds *natsauth.Credentials, r natsauth.Role) (*conn, jetstream.JetStream) {
	t.Helper()
	c := &conn{refused: natstest.NewRefusals()}
	nc, err := nats.Connect(ns.ClientURL(), append(creds.Options(r), c.refused.Option())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	c.Conn = nc
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return c, js
}

// wantAllowed checks that nothing was refused.
func (c *conn) wantAllowed(t *testing.T, what string) {
	t.Helper()
	c.refused.ExpectNone(t, c.Conn, what)
}

// TestAnonymousRefused: a client without a credential is refused at
// connect, and so is one with a key the server does not know.
func TestAnonymousRefused(t *testing.T) {
	ns, _ := startServer(t)
	if nc, err := nats.Connect(ns.ClientURL()); err == nil {
		nc.Close()
		t.Fatal("an anonymous client connected")
	} else if !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("anonymous connect: %v, want an authorization violation", err)
	}
	stranger, err := natsauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if nc, err := nats.Connect(ns.ClientURL(), stranger.Options(natsauth.Edge)...); err == nil {
		nc.Close()
		t.Fatal("an unknown nkey connected")
	}
}

// TestRoleRefusals: for each role, each action outside it is refused by
// the server with a permissions violation.
func TestRoleRefusals(t *testing.T) {
	ns, creds := startServer(t)
	pub := func(s string) natstest.Action { return natstest.Action{Pub: s} }
	sub := func(s string) natstest.Action { return natstest.Action{Sub: s} }
	api := func(s string) natstest.Action { return natstest.Action{Pub: "$JS.API." + s} }
	forgeries := map[natsauth.Role][]natstest.Action{
		natsauth.Edge: {
			api("STREAM.PURGE.CHIO_QUARANTINE"), api("STREAM.UPDATE.CHIO_QUARANTINE"),
			pub("chio.quarantine.events"),                         // hiding a forgery among the ledger's refusals, or faking one
			pub("$KV.CHIO_REVOCATIONS." + schemas.KVKey("cap-A")), // un-revoke (delete) or forge a revocation
			api("STREAM.UPDATE.KV_CHIO_REVOCATIONS"), api("STREAM.PURGE.KV_CHIO_REVOCATIONS"), api("STREAM.DELETE.KV_CHIO_REVOCATIONS"),
			api("STREAM.MSG.DELETE.KV_CHIO_REVOCATIONS"),
			api("STREAM.PURGE.KV_CHIO_BUDGETS"), api("STREAM.DELETE.CHIO_EVENTS"), api("STREAM.UPDATE.CHIO_EVENTS"),
			api("STREAM.PURGE.CHIO_EVENTS"), api("STREAM.MSG.DELETE.CHIO_EVENTS"),
			pub("chio.events.timeout"), pub("chio.receipts.hello"), pub("$KV.chio-ledger-lease.writer"),
			pub("$KV.chio-ledger-lease.position.x"), // a forged standby position holds or frees the events' purge
			pub("$KV.CHIO_WITNESS.x"),
			pub("$KV.CHIO_LOG.events-stream"), api("STREAM.PURGE.KV_CHIO_LOG"), // telling the edges a forged stream is the log's
			api("CONSUMER.CREATE.CHIO_EVENTS.snoop"), api("DIRECT.GET.CHIO_EVENTS"), // reading every tenant's events
			sub("chio.events.>"), sub("chio.tools.*.invoke"), sub("_INBOX_ledger.>"), sub("_INBOX.>"),
			// Another part's durable consumer: pulled from, acknowledged for, deleted.
			api("CONSUMER.MSG.NEXT.CHIO_RECEIPTS.chio-projections-receipts"), api("CONSUMER.DELETE.CHIO_TASKS.chio-projections-tasks"),
		},
		natsauth.Ledger: {
			pub("chio.events.decision"), pub("chio.events.outcome"), pub("chio.events.envelope"), pub("chio.tasks.t1"),
			pub("$KV.CHIO_REVOCATIONS.x"), pub("$KV.CHIO_BUDGETS.x"), pub("chio.tools.k.invoke"),
			api("STREAM.DELETE.CHIO_EVENTS"), api("STREAM.UPDATE.KV_CHIO_REVOCATIONS"), api("STREAM.PURGE.CHIO_RECEIPTS"),
			api("STREAM.PURGE.CHIO_TASKS"), // only the edges expire tasks
			sub("chio.tools.*.invoke"), sub("_INBOX_edge.>"),
			api("CONSUMER.DELETE.CHIO_EVENTS.chio-projections-events"), pub("$JS.ACK.CHIO_EVENTS.chio-projections-events.1.1.1.1.1.0"),
		},
		natsauth.Projections: {
			pub("chio.quarantine.events"), // hiding a forgery among the ledger's refusals, or faking one
			pub("chio.events.decision"), pub("chio.events.envelope"), pub("chio.receipts.hello"), pub("chio.tasks.t1"),
			pub("$KV.CHIO_REVOCATIONS.x"), pub("$KV.CHIO_BUDGETS.x"),
			api("STREAM.UPDATE.CHIO_EVENTS"), api("STREAM.DELETE.CHIO_TASKS"), api("STREAM.PURGE.CHIO_RECEIPTS"),
			api("STREAM.PURGE.CHIO_TASKS"), api("STREAM.PURGE.CHIO_EVENTS"), // erasing history before it has folded it
			pub("$KV.chio-ledger-lease.position.x"),
			sub("chio.tools.*.invoke"), sub("_INBOX_ledger.>"),
			// The ledger's consumer: deleting it stops the ledger; pulling
			// and acknowledging its events would make it skip them.
			api("CONSUMER.DELETE.CHIO_EVENTS.chio-ledger"), api("CONSUMER.MSG.NEXT.CHIO_EVENTS.chio-ledger"),
			api("CONSUMER.DURABLE.CREATE.CHIO_EVENTS.chio-ledger"), pub("$JS.ACK.CHIO_EVENTS.chio-ledger.1.1.1.1.1.0"),
			api("CONSUMER.DELETE.CHIO_TASKS.chio-a2a-push"), pub("$KV.CHIO_LOG.events-stream"),
		},
		natsauth.Worker: {
			pub("chio.quarantine.events"), // hiding a forgery among the ledger's refusals, or faking one
			pub("chio.events.decision"), pub("chio.tools.k.invoke"), pub("$KV.CHIO_BUDGETS.x"), pub("$KV.CHIO_REVOCATIONS.x"),
			api("STREAM.INFO.CHIO_EVENTS"), api("CONSUMER.CREATE.CHIO_EVENTS.snoop"),
			// It reads revocations, and changes nothing of them.
			api("STREAM.CREATE.KV_CHIO_REVOCATIONS"), api("STREAM.PURGE.KV_CHIO_REVOCATIONS"), api("STREAM.DELETE.KV_CHIO_REVOCATIONS"),
			sub("chio.events.>"), sub("chio.receipts.>"), sub("_INBOX_edge.>"), pub("$KV.CHIO_LOG.events-stream"),
			api("STREAM.PURGE.CHIO_TASKS"), api("STREAM.PURGE.CHIO_EVENTS"), pub("$KV.chio-ledger-lease.position.x"),
		},
		natsauth.Operator: {
			pub("chio.quarantine.events"), // hiding a forgery among the ledger's refusals, or faking one
			pub("chio.events.decision"), pub("chio.events.envelope"), pub("chio.receipts.hello"), pub("chio.tasks.t1"),
			pub("$KV.CHIO_BUDGETS.x"), pub("chio.tools.k.invoke"),
			sub("chio.tools.*.invoke"), sub("chio.events.>"), sub("_INBOX_edge.>"),
		},
		natsauth.Reader: {
			pub("chio.quarantine.events"), // hiding a forgery among the ledger's refusals, or faking one
			pub("chio.events.decision"), pub("chio.receipts.hello"), pub("chio.tasks.t1"), pub("$KV.CHIO_REVOCATIONS.x"),
			api("STREAM.CREATE.CHIO_EVENTS"), api("STREAM.UPDATE.CHIO_EVENTS"), api("STREAM.PURGE.CHIO_EVENTS"),
			api("STREAM.PURGE.CHIO_TASKS"), pub("$KV.chio-ledger-lease.position.x"),
			sub("chio.tools.*.invoke"), sub("chio.receipts.>"), sub("_INBOX_edge.>"),
			api("CONSUMER.DELETE.CHIO_EVENTS.chio-ledger"), api("CONSUMER.MSG.NEXT.CHIO_EVENTS.chio-ledger"),
			api("CONSUMER.CREATE.CHIO_EVENTS.chio-ledger"), api("CONSUMER.CREATE.CHIO_EVENTS.chio-ledger.chio.events.>"),
			pub("$JS.ACK.CHIO_EVENTS.chio-ledger.1.1.1.1.1.0"), api("CONSUMER.MSG.NEXT.CHIO_TASKS.chio-projections-tasks"),
			pub("$KV.CHIO_LOG.events-stream"),
		},
	}
	for _, r := range natsauth.Roles() {
		t.Run(string(r), func(t *testing.T) {
			c, _ := connect(t, ns, creds, r)
			for _, a := range forgeries[r] {
				c.refused.ExpectRefused(t, c.Conn, string(r), a)
			}
		})
	}
}

// TestRolesDoTheirWork: each role can do what its part does (the
// refusals above are not a server that refuses everything).
func TestRolesDoTheirWork(t *testing.T) {
	ns, creds := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	op, opJS := connect(t, ns, creds, natsauth.Operator)
	revs, err := opJS.KeyValue(ctx, schemas.RevocationsBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := revs.Put(ctx, schemas.KVKey("cap-A"), []byte(`{"capability_id":"cap-A"}`)); err != nil {
		t.Fatalf("operator revokes: %v", err)
	}
	op.wantAllowed(t, "operator")

	edge, edgeJS := connect(t, ns, creds, natsauth.Edge)
	if _, err := edgeJS.Publish(ctx, schemas.SubjectDecision, []byte(`{}`)); err != nil {
		t.Fatalf("edge publishes a decision: %v", err)
	}
	erevs, err := schemas.OpenKeyValue(ctx, edgeJS, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatalf("edge opens revocations: %v", err)
	}
	if e, err := erevs.Get(ctx, schemas.KVKey("cap-A")); err != nil || len(e.Value()) == 0 {
		t.Fatalf("edge reads a revocation: %v", err)
	}
	w, err := erevs.WatchAll(ctx)
	if err != nil {
		t.Fatalf("edge watches revocations: %v", err)
	}
	<-w.Updates()
	_ = w.Stop()
	buds, err := edgeJS.CreateOrUpdateKeyValue(ctx, schemas.BudgetsConfig(1))
	if err != nil {
		t.Fatalf("edge opens budgets: %v", err)
	}
	if _, err := buds.Create(ctx, "k", []byte("1")); err != nil {
		t.Fatalf("edge charges a budget: %v", err)
	}
	if _, err := schemas.OpenStream(ctx, edgeJS, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatalf("edge opens the events stream: %v", err)
	}
	edge.wantAllowed(t, "edge")

	led, ledJS := connect(t, ns, creds, natsauth.Ledger)
	if _, err := ledJS.CreateOrUpdateStream(ctx, schemas.EventsStreamConfig(1)); err != nil {
		t.Fatalf("ledger configures its stream: %v", err)
	}
	cons, err := ledJS.CreateOrUpdateConsumer(ctx, schemas.EventsStream, jetstream.ConsumerConfig{Durable: schemas.LedgerConsumer, AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatalf("ledger's consumer: %v", err)
	}
	msgs, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for m := range msgs.Messages() {
		if err := m.Ack(); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != 1 {
		t.Fatalf("ledger read %d events, want 1 (%v)", n, msgs.Error())
	}
	if _, err := ledJS.Publish(ctx, schemas.ReceiptSubject("hello"), []byte(`{}`)); err != nil {
		t.Fatalf("ledger publishes a receipt: %v", err)
	}
	led.wantAllowed(t, "ledger")

	// A worker answers an edge's call on the edge's inbox.
	wk, _ := connect(t, ns, creds, natsauth.Worker)
	if _, err := wk.QueueSubscribe("chio.tools.k.invoke", "q", func(m *nats.Msg) { _ = m.Respond([]byte("ok")) }); err != nil {
		t.Fatal(err)
	}
	if err := wk.Flush(); err != nil {
		t.Fatal(err)
	}
	reply, err := edge.RequestWithContext(ctx, "chio.tools.k.invoke", nil)
	if err != nil || string(reply.Data) != "ok" {
		t.Fatalf("edge calls a worker: %v", err)
	}
	wk.wantAllowed(t, "worker")
	edge.wantAllowed(t, "edge")
}

// TestNamesMatchTheirOwners: the names the permission table spells out
// are the ones the packages that own them use.
func TestNamesMatchTheirOwners(t *testing.T) {
	g := strings.Join(append(natsauth.Edge.Grant().Publish, natsauth.Ledger.Grant().Publish...), " ")
	for _, name := range []string{
		schemas.EventsStream, schemas.ReceiptsStream, schemas.TasksStream, push.OutboxStream,
		"KV_" + schemas.RevocationsBucket, "$KV." + schemas.BudgetsBucket + ".>", "$KV." + schemas.VelocityBucket + ".>",
		"$KV." + schemas.ProofsBucket + ".>", "$KV." + schemas.ProofsEpochBucket + ".>", "$KV." + push.Bucket + ".>",
		"$KV." + acp.TasksBucket + ".>", "$KV." + a2aadapter.TaskBucket + ".>", "$KV." + lease.DefaultBucket + ".>",
		"$KV." + witness.Bucket + ".>", "$KV." + schemas.LogBucket + ".>", "KV_" + schemas.LogBucket, ledger.QuarantineStream, schemas.SubjectDecision, schemas.SubjectOutcome, schemas.SubjectEnvelope,
		schemas.SubjectTimeout, schemas.TasksSubjects, push.OutboxSubjects,
	} {
		if !strings.Contains(g, name) {
			t.Errorf("the permission table does not name %q", name)
		}
	}
	// The durable consumers it keeps other roles off, under the names
	// their owners give them.
	deny := strings.Join(natsauth.Reader.Grant().DenyPublish, " ")
	for _, d := range []string{schemas.EventsStream + "." + schemas.LedgerConsumer, schemas.TasksStream + "." + push.DefaultDurable,
		schemas.EventsStream + "." + projections.DefaultName + "-events", schemas.ReceiptsStream + "." + projections.DefaultName + "-receipts",
		schemas.TasksStream + "." + projections.DefaultName + "-tasks"} {
		if !strings.Contains(deny, "$JS.API.CONSUMER.DELETE."+d+" ") {
			t.Errorf("the permission table does not keep other roles off the durable consumer %s", d)
		}
	}
}

// TestSeedFileModes: seeds are written mode 0600 in a 0700 directory,
// and a seed file that group or others may read is refused, at start and
// as --nats-nkey.
func TestSeedFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "creds")
	creds, err := natsauth.LoadOrCreate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("credentials directory mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	for _, r := range natsauth.Roles() {
		if fi, err := os.Stat(creds.Path(r)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s seed mode %v (%v), want 0600", r, fi.Mode().Perm(), err)
		}
	}
	again, err := natsauth.LoadOrCreate(dir)
	if err != nil || again.Public(natsauth.Edge) != creds.Public(natsauth.Edge) {
		t.Fatalf("a second start did not reuse the seeds: %v", err)
	}
	if err := os.Chmod(creds.Path(natsauth.Edge), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := natsauth.LoadOrCreate(dir); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a world-readable seed at start: %v", err)
	}
	if _, err := (natsauth.Client{Nkey: creds.Path(natsauth.Edge)}).Options(natsauth.Edge); err == nil {
		t.Fatal("a world-readable seed as --nats-nkey was taken")
	}
}

// TestClientOptionErrors: the credential flags that cannot go together
// are refused before connecting.
func TestClientOptionErrors(t *testing.T) {
	for _, c := range []natsauth.Client{
		{Creds: "a", Nkey: "b"},
		{User: "u"},
		{PasswordFile: "p"},
		{TLSCert: "c"},
		{Nkey: filepath.Join(t.TempDir(), "missing.nk")},
	} {
		if _, err := c.Options(natsauth.Edge); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}
