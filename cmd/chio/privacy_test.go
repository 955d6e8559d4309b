package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// privateCall is one governed A2A call made by a tenant's agent.
type privateCall struct {
	who, text, receipt, task, capability string
}

// TestReadsArePrivateAndTheLogStaysVerifiable is the issue's scenario: chio
// up with two tenants. Nobody reads a call's arguments, tool, capability,
// subject or tenant without a credential that covers it, on any path; the
// public half of the log stays a standard verifiable log; an auditor's
// grant exports a receipt that chio verify accepts.
func TestReadsArePrivateAndTheLogStaysVerifiable(t *testing.T) {
	up := startUp(t, "--require-capability")
	ctx := context.Background()
	keys := filepath.Join(up.dir, "keys")
	issuerText, err := os.ReadFile(filepath.Join(keys, issuerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := schemas.ParsePrivateKey(string(issuerText))
	if err != nil {
		t.Fatal(err)
	}
	issuerPub := schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))
	now := uint64(time.Now().Unix())
	root := func(a *agent, id string) {
		tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: issuerPub, Subject: a.pub,
			Scope: schemas.Scope{Grants: grantsFor("hello-a2a-srv/hello_task")}, IssuedAt: now - 5, ExpiresAt: now + 3600})
		if err != nil {
			t.Fatal(err)
		}
		a.tok = tok
	}
	a, a1, b := newAgent(t), newAgent(t), newAgent(t)
	root(a, "cap-tenant-a")
	root(b, "cap-tenant-b")
	a1.tok, err = schemas.Delegate(a.key, a.tok, schemas.CapabilityBody{ID: "cap-tenant-a-helper", Subject: a1.pub,
		Scope: schemas.Scope{Grants: grantsFor("hello-a2a-srv/hello_task")}, IssuedAt: now - 5, ExpiresAt: now + 1800})
	if err != nil {
		t.Fatal(err)
	}
	call := func(who string, ag *agent, text string) privateCall {
		client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
			a2aclient.WithJSONRPCTransport(&http.Client{Transport: ag.proving(t), Timeout: 30 * time.Second}))
		if err != nil {
			t.Fatal(err)
		}
		msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))
		msg.Metadata = map[string]any{"chio": map[string]any{"governedIntent": map[string]any{
			"id": "intent-" + who, "server_id": "hello-a2a-srv", "tool_name": "hello_task", "purpose": "purpose-of-" + who}}}
		res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: msg})
		if err != nil {
			t.Fatal(err)
		}
		task := res.(*a2apb.Task)
		rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
		if task.Status.State != a2apb.TaskStateCompleted || rid == "" {
			t.Fatalf("%s: task %+v", who, task)
		}
		return privateCall{who: who, text: text, receipt: rid, task: string(task.ID), capability: ag.tok.ID}
	}
	ca, ca1, cb := call("A", a, "secret-of-tenant-A"), call("A1", a1, "secret-of-helper-A1"), call("B", b, "secret-of-tenant-B")

	opBytes, err := os.ReadFile(filepath.Join(up.dir, operatorTokenFile))
	if err != nil {
		t.Fatal(err)
	}
	operator := strings.TrimSpace(string(opBytes))
	// Wait, as the operator, until every receipt is in the log, every task
	// and lineage in the projections, and both reports have their rows.
	for _, c := range []privateCall{ca, ca1, cb} {
		waitStatus(t, operator, up.httpURL+"/v1/receipts/"+c.receipt, 200)
		waitStatus(t, operator, up.httpURL+"/v1/tasks/"+c.task, 200)
		waitStatus(t, operator, up.httpURL+"/v1/lineage/"+c.capability, 200)
	}
	waitBody(t, operator, up.httpURL+"/v1/reports/authorization-context?authorizationLimit=50", `"matchingReceipts":3`)

	// The tenants' tokens can delegate: their reads carry a DPoP proof.
	agents := map[string]*agent{"A": a, "A1": a1, "B": b}
	getAs := func(who, url string) (int, []byte) {
		t.Helper()
		if ag := agents[who]; ag != nil {
			return httpGetProven(t, ag, url)
		}
		return httpGetAs(t, operator, url)
	}
	aPrincipal := schemas.Principal(issuerPub, a.pub)
	// What must never reach a reader outside A's subtree.
	secretsOfA := []string{ca.text, ca1.text, ca.capability, ca1.capability, a.pub, a1.pub, aPrincipal, "purpose-of-A"}

	paths := func(c privateCall) []string {
		return []string{
			"/v1/receipts/" + c.receipt, "/v1/receipts/" + c.receipt + "/inclusion-proof", "/v1/receipts/" + c.receipt + "/tlog-proof",
			"/v1/tasks/" + c.task, "/v1/lineage/" + c.capability, "/v1/lineage/" + c.capability + "/chain",
		}
	}
	lists := []string{"/v1/receipts/query?limit=200", "/v1/tasks?limit=200", "/v1/reports/authorization-context?authorizationLimit=200",
		"/v1/reports/authorization-context?capabilityId=" + ca.capability, "/v1/receipts/query?capabilityId=" + ca.capability,
		"/log/tile/entries/000.p/" + fmt.Sprint(logSize(t, up.httpURL))}

	noLeak := func(what, body string, secrets []string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(body, s) {
				t.Errorf("%s leaks %q: %.300s", what, s, body)
			}
		}
	}
	// Anonymous: 401 on every private path, and nothing private anywhere.
	anonSecrets := append(append([]string{cb.text, cb.capability, b.pub, "hello_task", "hello-a2a-srv"}, secretsOfA...), "p:")
	for _, c := range []privateCall{ca, ca1, cb} {
		for _, p := range append(paths(c), lists...) {
			status, body := httpGetAs(t, "", up.httpURL+p)
			if status != http.StatusUnauthorized {
				t.Errorf("anonymous %s: %d, want 401: %.200s", p, status, body)
			}
			noLeak("anonymous "+p, string(body), anonSecrets)
		}
	}
	for _, p := range []string{"/metrics", "/healthz", "/readyz", "/log/checkpoint", "/v1/log/keys", "/v1/checkpoints/latest"} {
		status, body := httpGetAs(t, "", up.httpURL+p)
		if status != 200 {
			t.Errorf("anonymous %s: %d", p, status)
		}
		noLeak("anonymous "+p, string(body), anonSecrets)
	}
	// B, another tenant: A's items are 404 as if they did not exist, its
	// lists hold only its own, the entry bundles (every tenant's) are 403.
	for _, c := range []privateCall{ca, ca1} {
		for _, p := range paths(c) {
			status, body := getAs("B", up.httpURL+p)
			if status != http.StatusNotFound {
				t.Errorf("B reads %s: %d, want 404: %.200s", p, status, body)
			}
			// A 404 may repeat the id B itself asked for, nothing else.
			var unasked []string
			for _, s := range secretsOfA {
				if !strings.Contains(p, s) {
					unasked = append(unasked, s)
				}
			}
			noLeak("B reads "+p, string(body), unasked)
		}
	}
	for _, p := range lists {
		status, body := getAs("B", up.httpURL+p)
		want := 200
		if strings.HasPrefix(p, "/log/tile/entries/") {
			want = http.StatusForbidden
		}
		if status != want {
			t.Errorf("B lists %s: %d, want %d: %.200s", p, status, want, body)
		}
		noLeak("B lists "+p, string(body), secretsOfA)
	}
	if _, body := getAs("B", up.httpURL+"/v1/receipts/query?limit=200"); !strings.Contains(string(body), cb.text) || !strings.Contains(string(body), `"totalCount":1`) {
		t.Errorf("B does not find exactly its own receipt: %.300s", body)
	}
	// A reads its own and its delegate's; the delegate reads only its own.
	for _, c := range []privateCall{ca, ca1} {
		for _, p := range paths(c) {
			if status, body := getAs("A", up.httpURL+p); status != 200 {
				t.Errorf("A reads %s: %d %.200s", p, status, body)
			}
		}
	}
	for _, p := range paths(cb) {
		if status, _ := getAs("A", up.httpURL+p); status != http.StatusNotFound {
			t.Errorf("A reads B's %s: %d", p, status)
		}
	}
	if status, _ := getAs("A1", up.httpURL+"/v1/receipts/"+ca.receipt); status != http.StatusNotFound {
		t.Errorf("A's delegate reads A's own receipt: %d", status)
	}
	if status, body := getAs("A1", up.httpURL+"/v1/receipts/"+ca1.receipt); status != 200 || !strings.Contains(string(body), ca1.text) {
		t.Errorf("A's delegate reads its receipt: %d %.200s", status, body)
	}
	// The operator token chio up wrote reads everything, on the command line too.
	if _, body := httpGetAs(t, operator, up.httpURL+"/v1/receipts/query?limit=200"); !strings.Contains(string(body), `"totalCount":3`) {
		t.Errorf("operator query: %.300s", body)
	}
	out, err := chio(ctx, "trust", "authorization-context", "list", "--url", up.httpURL, "--token", "@"+filepath.Join(up.dir, operatorTokenFile), "--limit", "20")
	if err != nil || !strings.Contains(out, "purpose-of-A") || !strings.Contains(out, "purpose-of-B") {
		t.Errorf("trust list as operator: %v %.300s", err, out)
	}
	out, err = chio(ctx, "trust", "authorization-context", "list", "--url", up.httpURL, "--token", b.header(t), "--key", b.keyFile(t))
	if err != nil || !strings.Contains(out, "purpose-of-B") {
		t.Errorf("trust list as B: %v %.300s", err, out)
	}
	noLeak("trust list as B", out, secretsOfA)
	if _, err := chio(ctx, "trust", "authorization-context", "list", "--url", up.httpURL); err == nil {
		t.Error("trust list without a credential succeeded")
	}

	// An auditor's grant, issued on the command line, exports A's receipt
	// and its proof; chio verify accepts them and refuses a tampered copy.
	auditorPub := newAgent(t).pub
	out, err = chio(ctx, "capability", "issue", "--issuer-key", filepath.Join(keys, issuerKeyFile), "--subject", auditorPub,
		"--read", "receipts", "--ttl", "1h", "--output", "header")
	if err != nil {
		t.Fatalf("issue auditor grant: %v %s", err, out)
	}
	auditor := strings.TrimSpace(out)
	dir := t.TempDir()
	status, receipt := httpGetAs(t, auditor, up.httpURL+"/v1/receipts/"+ca.receipt)
	if status != 200 {
		t.Fatalf("auditor receipt: %d %s", status, receipt)
	}
	_, tp := httpGetAs(t, auditor, up.httpURL+"/v1/receipts/"+ca.receipt+"/tlog-proof")
	rf, pf := filepath.Join(dir, "receipt.json"), filepath.Join(dir, "receipt.tlog-proof")
	_ = os.WriteFile(rf, receipt, 0o600)
	_ = os.WriteFile(pf, tp, 0o600)
	kernelPub, _ := os.ReadFile(filepath.Join(keys, kernelPubFile))
	vkeyFile := filepath.Join(keys, checkpointVKeyFile)
	verify := []string{"verify", "--receipt", rf, "--proof", pf, "--vkey", vkeyFile, "--kernel-key", strings.TrimSpace(string(kernelPub))}
	if out, err := chio(ctx, verify...); err != nil || !strings.Contains(out, "verify: OK") {
		t.Fatalf("chio verify: %v %s", err, out)
	}
	_ = os.WriteFile(rf, []byte(strings.Replace(string(receipt), ca.text, "secret-of-tenant-Z", 1)), 0o600)
	if out, err := chio(ctx, verify...); err == nil {
		t.Fatalf("chio verify accepted a tampered receipt: %s", out)
	}
	// The same check with off-the-shelf libraries: the leaf is the JCS of
	// the signed receipt; its RFC 6962 audit path leads to the root of a
	// checkpoint whose signature sumdb/note verifies.
	vkey, _ := os.ReadFile(vkeyFile)
	verifier, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	_, ipBody := httpGetAs(t, auditor, up.httpURL+"/v1/receipts/"+ca.receipt+"/inclusion-proof")
	var ip struct {
		LeafIndex  uint64   `json:"leaf_index"`
		TreeSize   uint64   `json:"tree_size"`
		AuditPath  []string `json:"audit_path"`
		Checkpoint string   `json:"checkpoint"`
	}
	var wrapped struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	if json.Unmarshal(ipBody, &ip) != nil || json.Unmarshal(receipt, &wrapped) != nil {
		t.Fatalf("proof %s", ipBody)
	}
	cp := openCheckpoint(t, []byte(ip.Checkpoint), verifier)
	leaf, err := schemas.CanonicalizeJSON(wrapped.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	path := make([][]byte, len(ip.AuditPath))
	for i, h := range ip.AuditPath {
		if path[i], err = schemas.ParseHash(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, ip.LeafIndex, cp.Size, rfc6962.DefaultHasher.HashLeaf(leaf), path, cp.Hash); err != nil {
		t.Fatalf("transparency-dev/merkle: %v", err)
	}

	// A monitor with no credential: it holds the checkpoint seen now,
	// the ledger restarts, a call follows, and the new checkpoint is
	// proved consistent with the old one from public data alone.
	_, raw := httpGetAs(t, "", up.httpURL+"/log/checkpoint")
	before := openCheckpoint(t, raw, verifier)
	if err := up.stop(); err != nil {
		t.Fatal(err)
	}
	httpRE := regexp.MustCompile(`log API on (http://[0-9.:]+)`)
	outUp, _ := startCommand(t, httpRE, "up", "--data-dir", up.dir, "--listen", "127.0.0.1:0", "--nats-listen", "127.0.0.1:0", "--require-capability")
	up.httpURL = httpRE.FindStringSubmatch(outUp)[1]
	// The restart lost the in-memory replay state: proofs issued before
	// it was rebuilt, plus the clock skew, are refused (they might have
	// been claimed in the lost state), so the agent's next proof waits.
	time.Sleep(dpop.DefaultSkew + 2*time.Second)
	call("A-after", a, "secret-after-restart")
	var after tlog.Checkpoint
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if status, raw := httpGetAs(t, "", up.httpURL+"/log/checkpoint"); status == 200 {
			if after = openCheckpoint(t, raw, verifier); after.Size > before.Size {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the log did not grow past %d after the restart", before.Size)
		}
	}
	status, body := httpGetAs(t, "", fmt.Sprintf("%s/v1/log/consistency-proof?from=%d&to=%d", up.httpURL, before.Size, after.Size))
	var cons struct {
		Proof []string `json:"proof"`
	}
	if status != 200 || json.Unmarshal(body, &cons) != nil {
		t.Fatalf("consistency: %d %s", status, body)
	}
	cpath := make([][]byte, len(cons.Proof))
	for i, h := range cons.Proof {
		if cpath[i], err = schemas.ParseHash(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, before.Size, after.Size, cpath, before.Hash, after.Hash); err != nil {
		t.Fatalf("monitor: consistency across the restart: %v", err)
	}
}

// openCheckpoint verifies a checkpoint note's signature, as a witness does,
// and parses it.
func openCheckpoint(t *testing.T, raw []byte, v note.Verifier) tlog.Checkpoint {
	t.Helper()
	n, err := note.Open(raw, note.VerifierList(v))
	if err != nil {
		t.Fatalf("checkpoint signature: %v", err)
	}
	var cp tlog.Checkpoint
	if _, err := cp.Unmarshal([]byte(n.Text)); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	return cp
}

func waitStatus(t *testing.T, token, url string, want int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		status, body := httpGetAs(t, token, url)
		if status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d %.300s", url, status, body)
		}
	}
}

func waitBody(t *testing.T, token, url, want string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body := httpGetAs(t, token, url)
		if strings.Contains(string(body), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never %q: %.300s", url, want, body)
		}
	}
}
