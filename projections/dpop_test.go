package projections

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/dpoptest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// TestProjectionReadersProvePossession: on the projection routes A's
// token, which can delegate, reads only with a proof by A's key, once per
// proof and only for the request the proof names; the token A's delegate C
// rebuilds from its own chain is refused as bearer and with C's proof;
// tokens that cannot delegate and the service token still read as bearer.
func TestProjectionReadersProvePossession(t *testing.T) {
	f := newScopeFixture(t)
	const path = "/v1/tasks"
	url := f.url + path
	tokA := f.readers["A"]
	signerA := f.signers[tokA]
	type want struct {
		status int
		check  string
	}
	do := func(t *testing.T, what string, auth func(h http.Header, htu string), w want) map[string]any {
		t.Helper()
		code, hdr, body, raw := getWith(t, f.url, path, auth)
		if code != w.status {
			t.Fatalf("%s: %d %s, want %d", what, code, raw, w.status)
		}
		if w.status == http.StatusOK {
			return body
		}
		if body["code"] != "invalid_dpop_proof" || body["check"] != w.check || !strings.HasPrefix(body["error"].(string), "dpop "+w.check+":") {
			t.Errorf("%s: body %s, want check %s", what, raw, w.check)
		}
		if got := hdr.Values("WWW-Authenticate"); len(got) != 1 || got[0] != dpop.Challenge(dpop.Check(w.check)) {
			t.Errorf("%s: WWW-Authenticate %q", what, got)
		}
		// A refusal may name what the caller itself sent (its token's id,
		// its proof's URL), nothing else.
		f.noLeak(t, "anonymous", path, raw, "cap-A-root", "/v1/tasks/task-A1")
		return body
	}
	bearer := func(token string) func(h http.Header, _ string) {
		return func(h http.Header, _ string) { h.Set("Authorization", "Bearer "+token) }
	}
	withProof := func(token, proof string) func(h http.Header, _ string) {
		return func(h http.Header, _ string) {
			h.Set("Authorization", "DPoP "+token)
			h.Set("DPoP", proof)
		}
	}

	do(t, "A as bearer", bearer(tokA), want{401, "missing_proof"})
	proof, err := signerA.Proof(http.MethodGet, url)
	if err != nil {
		t.Fatal(err)
	}
	body := do(t, "A with its proof", withProof(tokA, proof), want{200, ""})
	if got := taskIDs(body); strings.Join(got, " ") != "task-A1 task-C1 task-A2 task-A3" {
		t.Errorf("A's tasks: %v", got)
	}
	do(t, "the same proof again", withProof(tokA, proof), want{401, "replayed"})
	other, _ := signerA.Proof(http.MethodGet, f.url+"/v1/tasks/task-A1")
	do(t, "proof for another URL", withProof(tokA, other), want{401, "wrong_url"})
	post, _ := signerA.Proof(http.MethodPost, url)
	do(t, "proof for another method", withProof(tokA, post), want{401, "wrong_method"})

	// C rebuilds A's token from its own chain.
	rebuilt := header(t, f.C.tok.Ancestor(len(f.C.tok.DelegationChain)-1))
	if rebuilt != tokA {
		t.Fatal("the rebuilt token is not A's")
	}
	do(t, "rebuilt A as bearer", bearer(rebuilt), want{401, "missing_proof"})
	do(t, "rebuilt A with C's proof", withProof(rebuilt, dpoptest.ForgedProof(t, keyC, rebuilt, http.MethodGet, url)), want{401, "wrong_key"})

	// Tokens that cannot delegate, and the service token, stay bearer.
	for reader, tasks := range map[string]string{"C": "task-C1", "B": "task-B1 task-B2 task-B3", "tenant-A": "task-A1 task-C1 task-A2 task-A3"} {
		body := do(t, reader+" as bearer", bearer(f.readers[reader]), want{200, ""})
		if got := strings.Join(taskIDs(body), " "); got != tasks {
			t.Errorf("%s's tasks: %s, want %s", reader, got, tasks)
		}
	}
	do(t, "operator as bearer", bearer(opToken), want{200, ""})
}

// boundReceipt publishes a governed receipt of tn whose attribution
// records binding (nil: none).
func (f *scopeFixture) boundReceipt(t *testing.T, tn *tenant, receiptID string, ts uint64, binding map[string]any) {
	t.Helper()
	body := schemas.ReceiptBody{ID: receiptID, Timestamp: ts, CapabilityID: tn.tok.ID, ToolServer: tn.server, ToolName: tn.tool,
		Action:      schemas.ToolCallAction{Parameters: json.RawMessage(fmt.Sprintf(`{"note":%q}`, tn.secret))},
		Decision:    schemas.Decision{Verdict: schemas.VerdictAllow},
		ContentHash: schemas.EmptyContentHash, PolicyHash: schemas.SHA256Hex([]byte("policy")), TrustLevel: schemas.TrustMediated}
	g := &schemas.GovernedIntent{ID: "intent-" + receiptID, ServerID: tn.server, ToolName: tn.tool, Purpose: "purpose " + tn.secret}
	tx, err := g.Transaction(schemas.EvidenceAsserted)
	if err != nil {
		t.Fatal(err)
	}
	attr := map[string]any{"subject_key": tn.tok.Subject, "issuer_key": tn.tok.Issuer,
		"delegation_depth": len(tn.tok.DelegationChain), "grant_index": 0}
	if binding != nil {
		attr["binding"] = binding
	}
	body.Metadata, _ = json.Marshal(map[string]any{"governed_transaction": tx, "attribution": attr})
	leaf, err := schemas.SignReceiptLeaf(kernelPriv, body)
	if err != nil {
		t.Fatal(err)
	}
	f.h.receipt(receiptID, f.leaf, leaf)
	f.leaf++
}

// TestReportShowsSenderBinding: receipts whose attribution records a DPoP
// proof, a tool proof or a bearer presentation become rows whose sender
// constraint says so, and the summary counts the proven ones; a bearer
// binding for A's capability, which can delegate, fails the reports that
// reach it.
func TestReportShowsSenderBinding(t *testing.T) {
	f := newScopeFixture(t)
	jkt := dpoptest.JKT
	f.boundReceipt(t, f.A, "rcpt-A-dpop", 2000, map[string]any{"method": "dpop", "jkt": jkt(keyA)})
	f.boundReceipt(t, f.C, "rcpt-C-tool", 2001, map[string]any{"method": "chio_dpop_v1", "jkt": jkt(keyC)})
	f.boundReceipt(t, f.B, "rcpt-B-bearer", 2002, map[string]any{"method": "bearer"})
	f.h.caughtUp(f.r)

	code, body, raw := f.get(t, "/v1/reports/authorization-context?authorizationLimit=200", opToken)
	if code != http.StatusOK {
		t.Fatalf("report: %d %s", code, raw)
	}
	type sender struct {
		ProofRequired      bool   `json:"proofRequired"`
		ProofType          string `json:"proofType"`
		ProofSchema        string `json:"proofSchema"`
		ProofKeyThumbprint string `json:"proofKeyThumbprint"`
	}
	var rep struct {
		Summary  map[string]int `json:"summary"`
		Receipts []struct {
			ReceiptID        string `json:"receiptId"`
			SenderConstraint sender `json:"senderConstraint"`
		} `json:"receipts"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string]sender{
		"rcpt-A-dpop":   {true, "dpop", "dpop+jwt", jkt(keyA)},
		"rcpt-C-tool":   {true, "chio_dpop_v1", "chio.dpop_proof.v1", jkt(keyC)},
		"rcpt-B-bearer": {},
		// Signed before bindings were recorded: unbound.
		"rcpt-A1": {}, "rcpt-B1": {}, "rcpt-C1": {}, "rcpt-A2": {}, "rcpt-B2": {},
	}
	if len(rep.Receipts) != len(want) {
		t.Fatalf("%d rows, want %d: %s", len(rep.Receipts), len(want), raw)
	}
	for _, row := range rep.Receipts {
		if w, ok := want[row.ReceiptID]; !ok || row.SenderConstraint != w {
			t.Errorf("%s: sender constraint %+v, want %+v", row.ReceiptID, row.SenderConstraint, w)
		}
	}
	if s := rep.Summary; s["matchingReceipts"] != 8 || s["senderBoundReceipts"] != 2 || s["dpopBoundReceipts"] != 2 {
		t.Errorf("summary %v", body["summary"])
	}
	// C's own report: its tool-proof row alone is bound.
	code, body, raw = f.get(t, "/v1/reports/authorization-context?capabilityId=cap-A-child", f.readers["C"])
	if sum, _ := body["summary"].(map[string]any); code != http.StatusOK || sum["senderBoundReceipts"] != float64(1) || sum["dpopBoundReceipts"] != float64(1) {
		t.Errorf("C's report: %d %s", code, raw)
	}

	// A bearer binding for a capability that can delegate contradicts the
	// kernel's rule: the reports that reach it fail closed, others do not.
	f.boundReceipt(t, f.A, "rcpt-A-bearer", 2003, map[string]any{"method": "bearer"})
	f.h.caughtUp(f.r)
	for _, c := range []struct{ reader, query string }{{"operator", ""}, {"A", ""}, {"tenant-A", "capabilityId=cap-A-root"}} {
		code, body, raw := f.get(t, "/v1/reports/authorization-context?"+c.query, f.readers[c.reader])
		if code != http.StatusUnprocessableEntity || body["code"] != CodeUnprojectable || body["receiptId"] != "rcpt-A-bearer" ||
			!strings.Contains(body["error"].(string), "inconsistent binding") {
			t.Errorf("%s?%s: %d %s, want 422 naming rcpt-A-bearer", c.reader, c.query, code, raw)
		}
	}
	if code, _, raw := f.get(t, "/v1/reports/authorization-context", f.readers["B"]); code != http.StatusOK {
		t.Errorf("B's report: %d %s", code, raw)
	}
}
