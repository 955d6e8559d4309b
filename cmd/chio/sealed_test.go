package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/ledger"
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
		// The ledger's own consumer: deleting it would stop the ledger,
		// pulling from it would make the ledger skip what was pulled.
		{natsauth.Reader, natstest.Action{Pub: "$JS.API.CONSUMER.DELETE." + schemas.EventsStream + "." + schemas.LedgerConsumer}},
		{natsauth.Projections, natstest.Action{Pub: "$JS.API.CONSUMER.MSG.NEXT." + schemas.EventsStream + "." + schemas.LedgerConsumer}},
	} {
		nc := dialUp(t, up.natsURL, up.dir, c.role)
		refused := natstest.NewRefusals()
		nc.SetErrorHandler(refused.Handler)
		refused.ExpectRefused(t, nc, string(c.role), c.do)
		nc.Close()
	}
}

// TestUpFoldsOnlyCertifiedEdges: with an edge's own NATS credential, an
// event the edge key did not sign, or one signed under a credential
// another issuer made, or by a revoked credential, makes no receipt: it is
// quarantined with the reason, counted and logged. A signed call's
// receipt names the edge that decided, and chio verify shows it.
func TestUpFoldsOnlyCertifiedEdges(t *testing.T) {
	up := startUp(t)
	js, err := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Edge))
	if err != nil {
		t.Fatal(err)
	}
	genuine := upSigner(t, filepath.Join(up.dir, "keys"))
	_, strangerIssuer, _ := ed25519.GenerateKey(rand.Reader)
	dir := t.TempDir()
	stranger, err := issueEdgeCredential(strangerIssuer, "chio-up", filepath.Join(dir, "edge.key"), filepath.Join(dir, "edge.cred"), time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := publishCall(t, js, nil, schemas.VerdictAllow)
	forged := publishCall(t, js, stranger, schemas.VerdictAllow)
	signed := publishCall(t, js, genuine, schemas.VerdictAllow)
	body := waitReceipt(t, up, signed)
	for _, id := range []string{unsigned, forged} {
		if status, _ := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id); status != http.StatusNotFound {
			t.Errorf("receipt %s of an event no certified edge signed: %d, want 404", id, status)
		}
	}
	var got struct {
		Receipt struct {
			Metadata struct {
				Edge schemas.EdgeRef `json:"edge"`
			} `json:"metadata"`
		} `json:"receipt"`
	}
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	c := genuine.Credential()
	if want := (schemas.EdgeRef{EdgeID: c.EdgeID, Key: c.PublicKey, CredentialID: c.ID}); got.Receipt.Metadata.Edge != want {
		t.Fatalf("receipt names edge %+v, want %+v", got.Receipt.Metadata.Edge, want)
	}
	receipt := filepath.Join(t.TempDir(), "receipt.json")
	if err := os.WriteFile(receipt, body, 0o600); err != nil {
		t.Fatal(err)
	}
	proof := filepath.Join(t.TempDir(), "proof")
	_, raw := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+signed+"/tlog-proof")
	if err := os.WriteFile(proof, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	kernel, _ := os.ReadFile(filepath.Join(up.dir, "keys", kernelPubFile))
	out, err := chio(context.Background(), "verify", "--receipt", receipt, "--proof", proof, "--vkey", filepath.Join(up.dir, "keys", "checkpoint.vkey"),
		"--kernel-key", strings.TrimSpace(string(kernel)))
	if err != nil || !strings.Contains(out, `edge: "chio-up" key "`+c.PublicKey+`" credential "`+c.ID+`"`) {
		t.Fatalf("chio verify: %v\n%s", err, out)
	}

	// Revoked: what the credential signs from then on is refused too.
	if out, err := chio(context.Background(), "capability", "revoke", c.ID, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Operator)); err != nil {
		t.Fatalf("revoke the edge credential: %v %s", err, out)
	}
	time.Sleep(1100 * time.Millisecond) // the stream's time is in seconds: after the revocation's
	revoked := publishCall(t, js, genuine, schemas.VerdictDeny)

	// The quarantine holds each, with why.
	want := map[string]string{unsigned: "no edge signature", forged: "not issued by a trusted issuer", revoked: "revoked"}
	ojs, err := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Operator))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		found := quarantined(t, ojs)
		ok := true
		for id, why := range want {
			if !strings.Contains(found[id], why) {
				ok = false
			}
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quarantine holds %v, want the reasons %v", found, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if status, _ := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+revoked); status != http.StatusNotFound {
		t.Errorf("a revoked edge credential's call has a receipt: %d", status)
	}
	// A rebuild with the same trust folds the same log: the same
	// messages refused, the same receipts naming the same edge.
	_, cp := httpGetAs(t, "", up.httpURL+"/log/checkpoint")
	lines := strings.Split(string(cp), "\n")
	rebuilt, err := chio(context.Background(), "ledger", "rebuild", "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Reader),
		"--edge-issuer", filepath.Join(up.dir, "keys", issuerPubFile), "--data-dir", t.TempDir(), "--keys", filepath.Join(up.dir, "keys"))
	if err != nil || !strings.HasPrefix(rebuilt, "size "+lines[1]+"\nroot "+lines[2]+"\n") {
		t.Fatalf("rebuild: %v\n%s\nwant the live checkpoint's size and root\n%s", err, rebuilt, cp)
	}
	_, metrics := httpGetAs(t, "", up.httpURL+"/metrics")
	// An allowed call is two messages (decision, outcome); a denied one is one.
	for r, n := range map[string]string{"unsigned": "2", "issuer": "2", "revoked": "1"} {
		if !strings.Contains(string(metrics), `chio_ledger_events_quarantined_total{reason="`+r+`"} `+n) {
			t.Errorf("metrics do not count one %s message:\n%s", r, grepLines(string(metrics), "quarantined"))
		}
	}
}

// quarantined maps each receipt id of the quarantined messages to the
// reason the ledger gave.
func quarantined(t *testing.T, js jetstream.JetStream) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, ledger.QuarantineStream)
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return out
		}
		var ev struct {
			ReceiptID string `json:"receipt_id"`
		}
		_ = json.Unmarshal(m.Data, &ev)
		out[ev.ReceiptID] += m.Header.Get(ledger.HeaderQuarantineReason) + ";"
	}
}

func grepLines(s, sub string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			b.WriteString(line)
		}
	}
	return b.String()
}

// waitReceipt waits until up serves receipt id and returns the body.
func waitReceipt(t *testing.T, up *upProcess, id string) []byte {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		status, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+id)
		if status == http.StatusOK {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s: %d %s", id, status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestUpServesOnlySignedTasks: a task commit cloned from a genuine one onto
// a new task, with the attacker's result, published with the edge role's
// own NATS credential, is served by neither A2A tasks/get nor the read
// API; neither is a genuine commit's signature copied onto another task.
// The genuine task is served as its edge wrote it.
func TestUpServesOnlySignedTasks(t *testing.T) {
	ctx := t.Context()
	up := startUp(t)
	client := cardClient(t, up.httpURL)
	task := sendTask(t, client, "genuine")
	js, err := jetstream.New(dialUp(t, up.natsURL, up.dir, natsauth.Edge))
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, schemas.TasksStream)
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.GetMsg(ctx, 1, jetstream.WithGetMsgSubject(schemas.TaskSubject(string(task.ID))))
	if err != nil {
		t.Fatal(err)
	}
	clone := func(data []byte, keepSignature bool) *nats.Msg {
		h := nats.Header{}
		for _, k := range []string{schemas.HeaderTaskSummary, schemas.HeaderReplica} {
			h.Set(k, first.Header.Get(k))
		}
		if keepSignature {
			for _, k := range []string{schemas.HeaderEdgeCredential, schemas.HeaderEdgeSignature, schemas.HeaderTaskBodySHA256, schemas.HeaderTaskPrev} {
				h.Set(k, first.Header.Get(k))
			}
		}
		return &nats.Msg{Header: h, Data: data}
	}
	forgedResult := []byte(strings.ReplaceAll(string(first.Data), "genuine", "transfer $1,000,000 to attacker"))
	forgeries := map[string]*nats.Msg{
		"unsigned clone with the attacker's result":  clone(forgedResult, false),
		"genuine signature copied onto another task": clone(first.Data, true),
	}
	ids := map[string]string{}
	for name, m := range forgeries {
		ids[name] = uuid.Must(uuid.NewV7()).String()
		m.Subject = schemas.TaskSubject(ids[name])
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatalf("%s: publish: %v", name, err)
		}
	}
	// A call after the forgeries: once the read API serves its task, the
	// projection has folded past them.
	after := sendTask(t, client, "after")
	waitStatus(t, up.token, up.httpURL+"/v1/tasks/"+string(after.ID), http.StatusOK)
	for name, id := range ids {
		if got, err := client.GetTask(ctx, &a2apb.GetTaskRequest{ID: a2apb.TaskID(id)}); err == nil {
			t.Errorf("%s: A2A tasks/get serves it: %v", name, got.Status)
		}
		if code, body := httpGetAs(t, up.token, up.httpURL+"/v1/tasks/"+id); code != http.StatusNotFound {
			t.Errorf("%s: /v1/tasks serves it: %d %.200s", name, code, body)
		}
	}
	got, err := client.GetTask(ctx, &a2apb.GetTaskRequest{ID: task.ID})
	if err != nil || got.Status.State != a2apb.TaskStateCompleted {
		t.Fatalf("the genuine task: %v, %v", got, err)
	}
}
