package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// startEdgeA2A runs `chio edge a2a` in-process against a NATS server and
// returns its JSON-RPC URL.
func startEdgeA2A(t *testing.T, args ...string) string {
	t.Helper()
	re := regexp.MustCompile(`JSON-RPC (http://[0-9.:]+/a2a)`)
	out, _ := startCommand(t, re, append([]string{"edge", "a2a", "--listen", "127.0.0.1:0"}, args...)...)
	return re.FindStringSubmatch(out)[1]
}

type agent struct {
	key ed25519.PrivateKey
	pub string
	tok *schemas.CapabilityToken
}

func newAgent(t *testing.T) *agent {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &agent{key: k, pub: schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))}
}

func (a *agent) header(t *testing.T) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(a.tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// proving presents the agent's token with a DPoP proof per request.
func (a *agent) proving(t *testing.T) http.RoundTripper {
	t.Helper()
	s, err := dpop.NewSigner(a.key, a.header(t))
	if err != nil {
		t.Fatal(err)
	}
	return &dpop.Transport{Signer: s}
}

// keyFile writes the agent's key as capability keygen does and returns the file.
func (a *agent) keyFile(t *testing.T) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "agent.key")
	if err := os.WriteFile(f, []byte(schemas.EncodePrivateKey(a.key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// httpGetProven GETs url as the agent, with a DPoP proof.
func httpGetProven(t *testing.T, a *agent, url string) (int, []byte) {
	t.Helper()
	c := &http.Client{Transport: a.proving(t), Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func grantsFor(skills ...string) []schemas.ToolGrant {
	var gs []schemas.ToolGrant
	for _, s := range skills {
		p, _ := splitSkill(s)
		gs = append(gs, schemas.ToolGrant{ServerID: p[0], ToolName: p[1], Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}})
	}
	return gs
}

type signedReceipt struct {
	ID         string `json:"id"`
	ToolServer string `json:"tool_server"`
	Decision   struct {
		Verdict string `json:"verdict"`
	} `json:"decision"`
	Metadata struct {
		Attribution         schemas.Attribution          `json:"attribution"`
		GovernedTransaction *schemas.GovernedTransaction `json:"governed_transaction"`
	} `json:"metadata"`
}

// awaitLogReceipt polls the log API, reading with token (chio up's
// operator token or a ledger's service token), until the receipt is in
// the log.
func awaitLogReceipt(t *testing.T, base, token, id string) signedReceipt {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := httpGetAs(t, token, base+"/v1/receipts/"+id)
		if code == http.StatusOK {
			var w struct {
				Receipt signedReceipt `json:"receipt"`
			}
			if err := json.Unmarshal(body, &w); err != nil {
				t.Fatal(err)
			}
			return w.Receipt
		}
		if time.Now().After(deadline) {
			t.Fatalf("receipt %s never reached the log (%d)", id, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// downstreamReceipt is the receipt id of the call a relay made, from the
// relay's result artifact.
func downstreamReceipt(t *testing.T, task *a2apb.Task) string {
	t.Helper()
	for _, a := range task.Artifacts {
		for _, p := range a.Parts {
			raw, _ := json.Marshal(p)
			var v struct {
				Data struct {
					Downstream struct {
						ReceiptID string `json:"receiptId"`
					} `json:"downstream"`
				} `json:"data"`
			}
			if json.Unmarshal(raw, &v) == nil && v.Data.Downstream.ReceiptID != "" {
				return v.Data.Downstream.ReceiptID
			}
		}
	}
	raw, _ := json.Marshal(task)
	t.Fatalf("no downstream receipt in %s", raw)
	return ""
}

// A three-hop delegated call: agent A calls agent B (a relay on edge X),
// which calls agent C (a relay on edge Y), which calls the hello tool (on
// chio up's edge), each hop under a capability delegated from the one
// before. The three receipts' call chains extend one another, the ledger
// observes each hop inside its open parent, and a chain that names a
// closed call as its parent stays asserted.
func TestThreeHopDelegatedCall(t *testing.T) {
	up := startUp(t)
	ctx := context.Background()
	issuerText, err := os.ReadFile(filepath.Join(up.dir, "keys", issuerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := schemas.ParsePrivateKey(string(issuerText))
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(time.Now().Unix())
	a, b, c := newAgent(t), newAgent(t), newAgent(t)
	if a.tok, err = schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: "cap-a", Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject: a.pub, Scope: schemas.Scope{Grants: grantsFor("agent-b/ask", "agent-c/ask", "hello-a2a-srv/hello_task")}, IssuedAt: now - 60, ExpiresAt: now + 3600}); err != nil {
		t.Fatal(err)
	}
	if b.tok, err = schemas.Delegate(a.key, a.tok, schemas.CapabilityBody{ID: "cap-b", Subject: b.pub,
		Scope: schemas.Scope{Grants: grantsFor("agent-c/ask", "hello-a2a-srv/hello_task")}, IssuedAt: now - 60, ExpiresAt: now + 3600}); err != nil {
		t.Fatal(err)
	}
	if c.tok, err = schemas.Delegate(b.key, b.tok, schemas.CapabilityBody{ID: "cap-c", Subject: c.pub,
		Scope: schemas.Scope{Grants: grantsFor("hello-a2a-srv/hello_task")}, IssuedAt: now - 60, ExpiresAt: now + 3600}); err != nil {
		t.Fatal(err)
	}
	// Every token here can delegate, so each hop proves possession of its
	// subject key: the relays with --relay-key, the clients with dpop.Transport.
	dir := t.TempDir()
	bFile, cFile := filepath.Join(dir, "b.token"), filepath.Join(dir, "c.token")
	bKey, cKey := filepath.Join(dir, "b.key"), filepath.Join(dir, "c.key")
	_ = os.WriteFile(bFile, []byte(b.header(t)), 0o600)
	_ = os.WriteFile(cFile, []byte(c.header(t)), 0o600)
	_ = os.WriteFile(bKey, []byte(schemas.EncodePrivateKey(b.key)), 0o600)
	_ = os.WriteFile(cKey, []byte(schemas.EncodePrivateKey(c.key)), 0o600)
	issuerPub := filepath.Join(up.dir, "keys", issuerPubFile)
	edgeY := startEdgeA2A(t, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "edge-y"), "--edge-credential", up.credFile("edge-y"), "--issuer-pub", issuerPub, "--edge-id", "edge-y",
		"--relay-as", "agent-c/ask", "--relay-to", up.httpURL+"/a2a", "--relay-skill", "hello-a2a-srv/hello_task", "--relay-token", cFile, "--relay-key", cKey)
	edgeX := startEdgeA2A(t, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Edge), "--edge-key", up.certify(t, "edge-x"), "--edge-credential", up.credFile("edge-x"), "--issuer-pub", issuerPub, "--edge-id", "edge-x",
		"--relay-as", "agent-b/ask", "--relay-to", edgeY, "--relay-skill", "agent-c/ask", "--relay-token", bFile, "--relay-key", bKey)

	client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(edgeX, a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: a.proving(t), Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("three hops"))
	msg.Metadata = map[string]any{"chio": map[string]any{"targetSkillId": "ask", "governedIntent": map[string]any{
		"id": "intent-root", "server_id": "agent-b", "tool_name": "ask", "purpose": "plan a trip",
		"max_amount": map[string]any{"units": 5000, "currency": "EUR"},
	}}}
	res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok || task.Status.State != a2apb.TaskStateCompleted {
		raw, _ := json.Marshal(res)
		t.Fatalf("A's call: %s", raw)
	}
	r1ID, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
	r2ID := downstreamReceipt(t, task)
	r1 := awaitLogReceipt(t, up.httpURL, up.token, r1ID)
	r2 := awaitLogReceipt(t, up.httpURL, up.token, r2ID)
	// R2's call was agent C's relay: its result names R3.
	var r3ID string
	{
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/query?toolServer=hello-a2a-srv")
		if code != http.StatusOK {
			t.Fatalf("query: %d %s", code, body)
		}
		var q struct {
			Receipts []signedReceipt `json:"receipts"`
		}
		_ = json.Unmarshal(body, &q)
		for _, r := range q.Receipts {
			if r.Metadata.GovernedTransaction != nil {
				r3ID = r.ID
			}
		}
	}
	if r3ID == "" {
		t.Fatal("no governed hello receipt")
	}
	r3 := awaitLogReceipt(t, up.httpURL, up.token, r3ID)

	for i, r := range []signedReceipt{r1, r2, r3} {
		if r.Decision.Verdict != "allow" || r.Metadata.GovernedTransaction == nil || r.Metadata.GovernedTransaction.Purpose != "plan a trip" {
			t.Fatalf("R%d: %+v", i+1, r)
		}
		if r.Metadata.Attribution.DelegationDepth != i {
			t.Fatalf("R%d delegation depth %d", i+1, r.Metadata.Attribution.DelegationDepth)
		}
	}
	if r1.Metadata.GovernedTransaction.CallChain != nil || r1.Metadata.Attribution.SubjectKey != a.pub {
		t.Fatalf("R1 is the root call of A: %+v", r1.Metadata)
	}
	want := []struct {
		r                 signedReceipt
		parent, delegator string
	}{{r2, r1ID, a.pub}, {r3, r2ID, b.pub}}
	for i, w := range want {
		cc := w.r.Metadata.GovernedTransaction.CallChain
		if cc == nil || cc.ParentReceiptID != w.parent || cc.ChainID != r1ID || cc.OriginSubject != a.pub || cc.DelegatorSubject != w.delegator ||
			cc.EvidenceClass != schemas.EvidenceObserved || cc.ParentRequestID == "" {
			t.Fatalf("R%d call chain %+v", i+2, cc)
		}
	}
	if r2.ToolServer != "agent-c" || r3.ToolServer != "hello-a2a-srv" {
		t.Fatalf("servers %s %s", r2.ToolServer, r3.ToolServer)
	}

	// A chain naming a call that has ended is only asserted.
	direct, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: c.proving(t), Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	late := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("late"))
	late.Metadata = map[string]any{"chio": map[string]any{"targetSkillId": "hello_task", "governedIntent": map[string]any{
		"id": "intent-late", "server_id": "hello-a2a-srv", "tool_name": "hello_task", "purpose": "replay",
		"call_chain": map[string]any{"chain_id": r1ID, "parent_request_id": "whatever", "parent_receipt_id": r2ID,
			"origin_subject": a.pub, "delegator_subject": b.pub},
	}}}
	res, err = direct.SendMessage(ctx, &a2apb.SendMessageRequest{Message: late})
	if err != nil {
		t.Fatal(err)
	}
	lateID, _ := res.(*a2apb.Task).Metadata["chio"].(map[string]any)["receiptId"].(string)
	if cc := awaitLogReceipt(t, up.httpURL, up.token, lateID).Metadata.GovernedTransaction.CallChain; cc == nil || cc.EvidenceClass != schemas.EvidenceAsserted {
		t.Fatalf("late chain %+v", cc)
	}

	// The projections answer from the signed receipts: the report has a
	// row per hop, the chains extend one another, and only observed hops
	// are bound to the delegated chain.
	var report schemas.AuthorizationContextReport
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := httpGetAs(t, up.token, up.httpURL+"/v1/reports/authorization-context?authorizationLimit=10")
		if code == http.StatusOK {
			if err := json.Unmarshal(body, &report); err != nil {
				t.Fatal(err)
			}
			if report.Summary.MatchingReceipts == 4 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("report: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	rows := map[string]schemas.AuthorizationContextRow{}
	for _, r := range report.Receipts {
		rows[r.ReceiptID] = r
	}
	if report.Summary.CallChainReceipts != 3 || report.Summary.DelegatedSenderBoundReceipts != 2 || len(rows) != 4 {
		t.Fatalf("summary %+v", report.Summary)
	}
	for _, w := range []struct {
		id, capability, subject, parent, class string
		bound                                  bool
	}{
		{r1ID, "cap-a", a.pub, "", "", false},
		{r2ID, "cap-b", b.pub, r1ID, schemas.EvidenceObserved, true},
		{r3ID, "cap-c", c.pub, r2ID, schemas.EvidenceObserved, true},
		{lateID, "cap-c", c.pub, r2ID, schemas.EvidenceAsserted, false},
	} {
		r, ok := rows[w.id]
		if !ok || r.CapabilityID != w.capability || r.SenderConstraint.SubjectKey != w.subject || r.SenderConstraint.DelegatedCallChainBound != w.bound {
			t.Fatalf("row of %s: %+v", w.id, r)
		}
		cc := r.TransactionContext.CallChain
		if (w.parent == "") != (cc == nil) || cc != nil && (cc.ParentReceiptID != w.parent || cc.EvidenceClass != w.class || cc.ChainID != r1ID || cc.OriginSubject != a.pub) {
			t.Fatalf("row of %s: call chain %+v", w.id, cc)
		}
	}
	out, err := chio(ctx, "trust", "authorization-context", "list", "--capability", "cap-b", "--limit", "5", "--url", up.httpURL,
		"--token", "@"+filepath.Join(up.dir, operatorTokenFile))
	if err != nil {
		t.Fatalf("trust authorization-context list: %v\n%s", err, out)
	}
	var byCap schemas.AuthorizationContextReport
	if err := json.Unmarshal([]byte(out), &byCap); err != nil || len(byCap.Receipts) != 1 || byCap.Receipts[0].ReceiptID != r2ID {
		t.Fatalf("trust list: %v\n%s", err, out)
	}
	// Lineage, root first, and A's task with its receipt, from any edge's writes.
	code, body := httpGetAs(t, up.token, up.httpURL+"/v1/lineage/cap-c/chain")
	var chain struct {
		Chain []schemas.CapabilityLineage `json:"chain"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &chain) != nil || len(chain.Chain) != 3 || chain.Chain[0].CapabilityID != "cap-a" || chain.Chain[2].SubjectKey != c.pub {
		t.Fatalf("lineage chain: %d %s", code, body)
	}
	code, body = httpGetAs(t, up.token, up.httpURL+"/v1/tasks/"+string(task.ID))
	if code != http.StatusOK || !strings.Contains(string(body), r1ID) || !strings.Contains(string(body), "TASK_STATE_COMPLETED") {
		t.Fatalf("task: %d %s", code, body)
	}
}

type bearerAuth string

func (b bearerAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
