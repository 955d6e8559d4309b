package projections

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Keys of the scoping tests.
var (
	trustedIssuer = testKey(20) // the root issuer the authenticator trusts
	keyA          = testKey(21) // tenant A's root holder
	keyC          = testKey(22) // A's delegate
	keyB          = testKey(23) // tenant B's root holder
	keyTenantA    = testKey(24) // holds a read grant on A's principal
	keyAll        = testKey(25) // holds chio.read/*
	keyAuditor    = testKey(26) // holds chio.read/receipts
	keyStranger   = testKey(27) // a capability from an untrusted issuer
)

// tenant is one party's data in the scoping fixture: everything in
// markers must reach only those who may see that party's data.
type tenant struct {
	name    string
	tok     *schemas.CapabilityToken
	server  string
	tool    string
	secret  string // in task messages, arguments and purposes
	markers []string
}

// scopeFixture is a projection holding two tenants' data, A (with a
// delegate C) and B, an unverified caller's task and an auditor's task,
// behind an authenticator with real revocations.
type scopeFixture struct {
	h   *harness
	r   *running
	url string
	kv  jetstream.KeyValue
	// readers: name → token ("" is anonymous)
	readers map[string]string
	// signers prove possession for the readers' tokens (by text) that
	// need a proof: A's, which can delegate.
	signers map[string]*dpop.Signer
	// principals of the fixture's authority paths
	pA, pC, pB, pAuditor string
	A, C, B              *tenant
	leaf                 uint64
}

func mustIssue(t *testing.T, priv ed25519.PrivateKey, body schemas.CapabilityBody) *schemas.CapabilityToken {
	t.Helper()
	body.Issuer = pubHex(priv)
	tok, err := schemas.IssueCapability(priv, body)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func mustGrant(t *testing.T, target string) schemas.ToolGrant {
	t.Helper()
	g, err := schemas.ReadGrant(target)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func header(t *testing.T, tok *schemas.CapabilityToken) string {
	t.Helper()
	s, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tokenLineage is tok's chain as a decision event carries it (the
// kernel's lineageRecords).
func tokenLineage(t *testing.T, tok *schemas.CapabilityToken) []schemas.CapabilityLineage {
	t.Helper()
	chain := make([]*schemas.CapabilityToken, 0, len(tok.DelegationChain)+1)
	for i := range tok.DelegationChain {
		chain = append(chain, tok.Ancestor(i))
	}
	chain = append(chain, tok)
	out := make([]schemas.CapabilityLineage, len(chain))
	for i, c := range chain {
		h, err := schemas.ScopeHash(c.Scope)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = schemas.CapabilityLineage{CapabilityID: c.ID, SubjectKey: c.Subject, IssuerKey: c.Issuer, IssuedAt: c.IssuedAt,
			ExpiresAt: c.ExpiresAt, DelegationDepth: i, ScopeHash: h, Grants: c.Scope.Grants}
		if i > 0 {
			out[i].ParentCapabilityID = chain[i-1].ID
		}
	}
	return out
}

// call publishes what one governed call of tn produces: the decision event
// carrying its lineage and the signed receipt.
func (f *scopeFixture) call(t *testing.T, tn *tenant, receiptID string, ts uint64) {
	t.Helper()
	params := json.RawMessage(fmt.Sprintf(`{"note":%q}`, tn.secret))
	d := &schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(receiptID),
		ReceiptID: receiptID, Timestamp: ts, CapabilityID: tn.tok.ID, ToolServer: tn.server, ToolName: tn.tool,
		Parameters: params, Decision: schemas.Decision{Verdict: schemas.VerdictAllow},
		PolicyHash: schemas.SHA256Hex([]byte("policy")), CapabilityLineage: tokenLineage(t, tn.tok)}
	if err := d.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(d)
	f.h.publish(schemas.SubjectDecision, raw, nats.Header{jetstream.MsgIDHeader: {d.EventID}})
	f.receipt(t, kernelPriv, tn, receiptID, ts)
}

// receipt publishes a governed receipt of tn signed by key.
func (f *scopeFixture) receipt(t *testing.T, key ed25519.PrivateKey, tn *tenant, receiptID string, ts uint64) {
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
	body.Metadata, _ = json.Marshal(map[string]any{
		"governed_transaction": tx,
		"attribution": schemas.Attribution{SubjectKey: tn.tok.Subject, IssuerKey: tn.tok.Issuer,
			DelegationDepth: len(tn.tok.DelegationChain), GrantIndex: 0},
	})
	leaf, err := schemas.SignReceiptLeaf(key, body)
	if err != nil {
		t.Fatal(err)
	}
	f.h.receipt(receiptID, f.leaf, leaf)
	f.leaf++
}

// task publishes a task owned by owner whose first message holds secret.
func (f *scopeFixture) task(id, ctxID, owner, secret string, n int) {
	f.h.commit(id, schemas.TaskEvent{Type: schemas.TaskEventCreated, Time: at(n), Owner: &schemas.TaskOwner{Subject: owner},
		ContextID: ctxID, Message: message("m-"+id, "ROLE_USER", secret)})
}

func newScopeFixture(t *testing.T) *scopeFixture {
	t.Helper()
	h := newHarness(t)
	f := &scopeFixture{h: h}
	now := uint64(time.Now().Unix())
	body := func(id string, subject ed25519.PrivateKey, grants ...schemas.ToolGrant) schemas.CapabilityBody {
		return schemas.CapabilityBody{ID: id, Subject: pubHex(subject), Scope: schemas.Scope{Grants: grants},
			IssuedAt: now - 60, ExpiresAt: now + 3600}
	}
	issuer := pubHex(trustedIssuer)
	f.pA = schemas.Principal(issuer, pubHex(keyA))
	f.pC = schemas.Principal(issuer, pubHex(keyA), pubHex(keyC))
	f.pB = schemas.Principal(issuer, pubHex(keyB))
	f.pAuditor = schemas.Principal(issuer, pubHex(keyAuditor))

	capA := mustIssue(t, trustedIssuer, body("cap-A-root", keyA,
		schemas.ToolGrant{ServerID: "srv-A", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke, schemas.OpDelegate}}))
	capC, err := schemas.Delegate(keyA, capA, body("cap-A-child", keyC,
		schemas.ToolGrant{ServerID: "srv-A", ToolName: "tool-gamma-C", Operations: []schemas.Operation{schemas.OpInvoke}}))
	if err != nil {
		t.Fatal(err)
	}
	capB := mustIssue(t, trustedIssuer, body("cap-B-root", keyB,
		schemas.ToolGrant{ServerID: "srv-B", ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}))
	f.A = &tenant{name: "A", tok: capA, server: "srv-A", tool: "tool-alpha-A", secret: "secret-argument-A"}
	f.C = &tenant{name: "C", tok: capC, server: "srv-A", tool: "tool-gamma-C", secret: "secret-argument-C"}
	f.B = &tenant{name: "B", tok: capB, server: "srv-B", tool: "tool-beta-B", secret: "secret-argument-B"}
	f.A.markers = []string{f.A.secret, f.A.tool, "cap-A-root", f.pA, "task-A"}
	f.C.markers = []string{f.C.secret, f.C.tool, "cap-A-child", f.pC, "task-C"}
	f.B.markers = []string{f.B.secret, f.B.tool, "cap-B-root", f.pB, "task-B", "srv-B"}

	f.signers = map[string]*dpop.Signer{}
	f.readers = map[string]string{
		"anonymous": "",
		"operator":  "op",
		"read-all":  header(t, mustIssue(t, trustedIssuer, body("cap-read-all", keyAll, mustGrant(t, schemas.ReadAll)))),
		"A":         header(t, capA),
		"C":         header(t, capC),
		"B":         header(t, capB),
		"tenant-A":  header(t, mustIssue(t, trustedIssuer, body("cap-read-tenant-A", keyTenantA, mustGrant(t, f.pA)))),
		"auditor":   header(t, mustIssue(t, trustedIssuer, body("cap-auditor", keyAuditor, mustGrant(t, schemas.ReadReceipts)))),
	}
	f.signers[f.readers["A"]] = mustSigner(t, keyA, f.readers["A"])

	// Tasks, interleaved so that every reader's pages skip others' tasks.
	f.task("task-A1", "ctx-shared", f.pA, f.A.secret, 0)
	f.task("task-B1", "ctx-shared", f.pB, f.B.secret, 1)
	f.task("task-C1", "ctx-shared", f.pC, f.C.secret, 2)
	f.task("task-B2", "ctx-B", f.pB, f.B.secret, 3)
	f.task("task-A2", "ctx-A", f.pA, f.A.secret, 4)
	f.task("task-B3", "ctx-shared", f.pB, f.B.secret, 5)
	f.task("task-U1", "ctx-shared", "unverified:0123456789abcdef", "secret-argument-U", 6)
	f.task("task-A3", "ctx-shared", f.pA, f.A.secret, 7)
	f.task("task-R1", "ctx-R", f.pAuditor, "secret-argument-R", 8)
	// Calls: decisions (which teach the projection C's ancestry) and
	// governed receipts, interleaved in the log.
	f.call(t, f.A, "rcpt-A1", 1000)
	f.call(t, f.B, "rcpt-B1", 1001)
	f.call(t, f.C, "rcpt-C1", 1002)
	f.call(t, f.A, "rcpt-A2", 1003)
	f.call(t, f.B, "rcpt-B2", 1004)

	kv, err := h.js.CreateKeyValue(h.ctx, schemas.RevocationsConfig(1))
	if err != nil {
		t.Fatal(err)
	}
	f.kv = kv
	w, err := revocation.Watch(h.ctx, kv, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	replay, err := dpopreplay.Open(h.ctx, h.js, 1, dpop.DefaultLifetime, dpop.DefaultSkew)
	if err != nil {
		t.Fatal(err)
	}
	auth := readauth.New(readauth.WithTrustedIssuers(issuer), readauth.WithRevocations(w), readauth.WithServiceToken("op"),
		readauth.WithReplay(replay))
	f.r = h.start("scoped", WithAuthenticator(auth))
	h.caughtUp(f.r)
	f.url = server(t, f.r.Service).URL
	return f
}

func mustSigner(t *testing.T, key ed25519.PrivateKey, token string) *dpop.Signer {
	t.Helper()
	s, err := dpop.NewSigner(key, token)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// get reads path with token ("" = anonymous): as Authorization: DPoP with
// a fresh proof when the fixture proves for the token, else as bearer.
func (f *scopeFixture) get(t *testing.T, path, token string) (int, map[string]any, []byte) {
	t.Helper()
	s := f.signers[token]
	if s == nil {
		return get(t, f.url, path, token)
	}
	code, _, body, raw := getWith(t, f.url, path, func(h http.Header, htu string) {
		if err := s.Authorize(h, http.MethodGet, htu); err != nil {
			t.Fatal(err)
		}
	})
	return code, body, raw
}

// sees is which tenants' data each reader may see (tasks and report rows).
func (f *scopeFixture) sees(reader string) []*tenant {
	switch reader {
	case "operator", "read-all":
		return []*tenant{f.A, f.C, f.B}
	case "A", "tenant-A":
		return []*tenant{f.A, f.C}
	case "C":
		return []*tenant{f.C}
	case "B":
		return []*tenant{f.B}
	}
	return nil
}

// noLeak fails if raw holds a marker of a tenant reader may not see,
// except allowed (the id the request named, the reader's own chain).
func (f *scopeFixture) noLeak(t *testing.T, reader, path string, raw []byte, allowed ...string) {
	t.Helper()
	visible := f.sees(reader)
	for _, tn := range []*tenant{f.A, f.C, f.B} {
		if slices.Contains(visible, tn) {
			continue
		}
		for _, m := range tn.markers {
			if slices.ContainsFunc(allowed, func(a string) bool { return strings.Contains(a, m) }) {
				continue
			}
			if strings.Contains(string(raw), m) {
				t.Errorf("%s reading %s sees %q of tenant %s: %s", reader, path, m, tn.name, raw)
			}
		}
	}
	if reader != "operator" && reader != "read-all" && strings.Contains(string(raw), "secret-argument-U") {
		t.Errorf("%s reading %s sees the unverified caller's task: %s", reader, path, raw)
	}
	if reader != "operator" && reader != "read-all" && reader != "auditor" && strings.Contains(string(raw), "secret-argument-R") {
		t.Errorf("%s reading %s sees the auditor's task: %s", reader, path, raw)
	}
}

func taskIDs(body map[string]any) []string {
	out := []string{}
	for _, t := range body["tasks"].([]any) {
		out = append(out, t.(map[string]any)["id"].(string))
	}
	return out
}

func reportRows(body map[string]any) []string {
	out := []string{}
	for _, row := range body["receipts"].([]any) {
		out = append(out, row.(map[string]any)["receiptId"].(string))
	}
	return out
}

// TestAnonymousIsRefusedEverywhere: every projection route needs a
// credential, and says so without a word of anyone's data.
func TestAnonymousIsRefusedEverywhere(t *testing.T) {
	f := newScopeFixture(t)
	for _, p := range []string{"/v1/tasks", "/v1/tasks?contextId=ctx-shared", "/v1/tasks/task-A1", "/v1/tasks/task-B1",
		"/v1/lineage/cap-A-root", "/v1/lineage/cap-A-child/chain", "/v1/lineage/cap-B-root",
		"/v1/reports/authorization-context", "/v1/reports/authorization-context?capabilityId=cap-A-root", "/v1/tasks?limit=abc"} {
		for _, tok := range []string{"", "not-a-credential", header(t, mustIssue(t, keyStranger, schemas.CapabilityBody{ID: "cap-stranger",
			Subject: pubHex(keyA), IssuedAt: uint64(time.Now().Unix()) - 60, ExpiresAt: uint64(time.Now().Unix()) + 60,
			Scope: schemas.Scope{Grants: []schemas.ToolGrant{mustGrant(t, schemas.ReadAll)}}}))} {
			req, _ := http.NewRequest(http.MethodGet, f.url+p, nil)
			if tok != "" {
				req.Header.Set("Authorization", "Bearer "+tok)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			var raw json.RawMessage
			_ = json.NewDecoder(resp.Body).Decode(&raw)
			resp.Body.Close()
			var body Error
			_ = json.Unmarshal(raw, &body)
			if resp.StatusCode != http.StatusUnauthorized || body.Code != CodeUnauthorized || body.Error == "" ||
				resp.Header.Get("WWW-Authenticate") != `Bearer realm="chio"` {
				t.Errorf("%s (credential %.10q): %d %s %q, want 401 unauthorized with a challenge", p, tok, resp.StatusCode, raw, resp.Header.Get("WWW-Authenticate"))
			}
			for _, tn := range []*tenant{f.A, f.C, f.B} {
				for _, m := range tn.markers {
					if strings.Contains(string(raw), m) && !strings.Contains(p, m) {
						t.Errorf("%s anonymously: the refusal names %q: %s", p, m, raw)
					}
				}
			}
		}
	}
}

// TestTasksAreScoped: each reader lists and reads only the tasks of its
// authority path's subtree and of the principals its grants name; others'
// are answered as missing, and the pages stay whole.
func TestTasksAreScoped(t *testing.T) {
	f := newScopeFixture(t)
	all := []string{"task-A1", "task-B1", "task-C1", "task-B2", "task-A2", "task-B3", "task-U1", "task-A3", "task-R1"}
	cases := []struct {
		reader string
		want   []string
	}{
		{"operator", all},
		{"read-all", all},
		{"A", []string{"task-A1", "task-C1", "task-A2", "task-A3"}}, // its delegate's too
		{"C", []string{"task-C1"}},                                  // not its delegator's
		{"B", []string{"task-B1", "task-B2", "task-B3"}},
		{"tenant-A", []string{"task-A1", "task-C1", "task-A2", "task-A3"}},
		{"auditor", []string{"task-R1"}}, // chio.read/receipts is no operator view: its own path only
	}
	for _, c := range cases {
		t.Run(c.reader, func(t *testing.T) {
			tok := f.readers[c.reader]
			for _, id := range all {
				path := "/v1/tasks/" + id
				code, body, raw := f.get(t, path, tok)
				if slices.Contains(c.want, id) {
					if code != http.StatusOK || body["id"] != id {
						t.Errorf("%s: %d %s, want the task", path, code, raw)
					}
					continue
				}
				want := map[string]any{"error": fmt.Sprintf("task %s is not known", id), "code": CodeTaskNotFound}
				if code != http.StatusNotFound || !reflect.DeepEqual(body, want) {
					t.Errorf("%s: %d %s, want the 404 of a missing task", path, code, raw)
				}
				f.noLeak(t, c.reader, path, raw, id)
			}
			// The whole list at once, then page by page at every size:
			// the pages join to the same list and the last has no cursor.
			for _, limit := range []int{200, 1, 2, 3} {
				var got []string
				cursor := ""
				for page := 0; ; page++ {
					path := fmt.Sprintf("/v1/tasks?limit=%d", limit)
					if cursor != "" {
						path += "&cursor=" + cursor
					}
					code, body, raw := f.get(t, path, tok)
					if code != http.StatusOK {
						t.Fatalf("%s: %d %s", path, code, raw)
					}
					f.noLeak(t, c.reader, path, raw)
					ids := taskIDs(body)
					got = append(got, ids...)
					next, _ := body["nextCursor"].(string)
					if len(ids) < limit && next != "" || len(ids) == 0 && page > 0 {
						t.Fatalf("%s: page %v with cursor %q", path, ids, next)
					}
					if next == "" {
						break
					}
					cursor = next
				}
				if !reflect.DeepEqual(got, c.want) && !(len(got) == 0 && len(c.want) == 0) {
					t.Errorf("limit %d: listed %v, want %v", limit, got, c.want)
				}
			}
			// Filters apply to the visible tasks only.
			code, body, raw := f.get(t, "/v1/tasks?contextId=ctx-shared&limit=1", tok)
			if code != http.StatusOK {
				t.Fatalf("context list: %d %s", code, raw)
			}
			f.noLeak(t, c.reader, "context list", raw)
			var wantShared []string
			for _, id := range c.want {
				if id != "task-A2" && id != "task-B2" && id != "task-R1" {
					wantShared = append(wantShared, id)
				}
			}
			if got := taskIDs(body); len(wantShared) > 0 && !reflect.DeepEqual(got, wantShared[:1]) || len(wantShared) == 0 && len(got) != 0 {
				t.Errorf("contextId=ctx-shared&limit=1: %v, want the first of %v", got, wantShared)
			}
			if next, _ := body["nextCursor"].(string); (next != "") != (len(wantShared) > 1) {
				t.Errorf("contextId=ctx-shared&limit=1: cursor %q with %d visible tasks in the context", next, len(wantShared))
			}
		})
	}
}

// TestLineageIsScoped: a capability's lineage is visible to its own chain
// and to readers of a prefix of its authority path; to anyone else it is
// missing.
func TestLineageIsScoped(t *testing.T) {
	f := newScopeFixture(t)
	caps := []string{"cap-A-root", "cap-A-child", "cap-B-root"}
	visible := map[string][]string{
		"operator": caps,
		"read-all": caps,
		"A":        {"cap-A-root", "cap-A-child"},
		"C":        {"cap-A-root", "cap-A-child"}, // its own chain, root included
		"B":        {"cap-B-root"},
		"tenant-A": {"cap-A-root", "cap-A-child"},
		"auditor":  nil,
	}
	for reader, want := range visible {
		t.Run(reader, func(t *testing.T) {
			tok := f.readers[reader]
			for _, id := range caps {
				for _, path := range []string{"/v1/lineage/" + id, "/v1/lineage/" + id + "/chain"} {
					code, body, raw := f.get(t, path, tok)
					if !slices.Contains(want, id) {
						want := map[string]any{"error": "no lineage record for capability " + id, "code": CodeLineageNotFound, "capabilityId": id}
						if code != http.StatusNotFound || !reflect.DeepEqual(body, want) {
							t.Errorf("%s: %d %s, want the 404 of a missing capability", path, code, raw)
						}
						f.noLeak(t, reader, path, raw, id)
						continue
					}
					if code != http.StatusOK {
						t.Errorf("%s: %d %s", path, code, raw)
						continue
					}
					if strings.HasSuffix(path, "/chain") {
						if body["capabilityId"] != id {
							t.Errorf("%s: %s", path, raw)
						}
					} else if body["capability_id"] != id {
						t.Errorf("%s: %s", path, raw)
					}
				}
			}
			// A capability nobody knows answers the same.
			if code, body, _ := f.get(t, "/v1/lineage/cap-unknown/chain", tok); code != http.StatusNotFound || body["code"] != CodeLineageNotFound {
				t.Errorf("unknown capability: %d %v", code, body)
			}
		})
	}
}

// TestReportIsScoped: the authorization-context report counts and lists
// only the receipts of the reader's subtree, and others' receipts can
// neither fail it nor show in it.
func TestReportIsScoped(t *testing.T) {
	f := newScopeFixture(t)
	allRows := []string{"rcpt-A1", "rcpt-B1", "rcpt-C1", "rcpt-A2", "rcpt-B2"}
	cases := []struct {
		reader, query string
		rows          []string
	}{
		{"operator", "", allRows},
		{"read-all", "", allRows},
		{"operator", "capabilityId=cap-B-root", []string{"rcpt-B1", "rcpt-B2"}},
		{"A", "", []string{"rcpt-A1", "rcpt-C1", "rcpt-A2"}},
		{"A", "capabilityId=cap-A-root", []string{"rcpt-A1", "rcpt-A2"}},
		{"A", "capabilityId=cap-A-child", []string{"rcpt-C1"}},
		{"A", "capabilityId=cap-B-root", nil},
		{"A", "toolName=tool-beta-B", nil},
		{"C", "", []string{"rcpt-C1"}},
		{"C", "capabilityId=cap-A-root", nil}, // its delegator's receipts are not its own
		{"B", "", []string{"rcpt-B1", "rcpt-B2"}},
		{"B", "capabilityId=cap-A-root", nil},
		{"B", "capabilityId=cap-A-child&authorizationLimit=1", nil},
		{"tenant-A", "", []string{"rcpt-A1", "rcpt-C1", "rcpt-A2"}},
		{"tenant-A", "capabilityId=cap-B-root", nil},
		{"auditor", "", nil}, // chio.read/receipts is not the operator view
		{"auditor", "capabilityId=cap-A-root", nil},
	}
	check := func(t *testing.T, reader, query string, rows []string) {
		t.Helper()
		path := "/v1/reports/authorization-context?" + query
		code, body, raw := f.get(t, path, f.readers[reader])
		if code != http.StatusOK {
			t.Fatalf("%s as %s: %d %s", path, reader, code, raw)
		}
		f.noLeak(t, reader, path, raw, query)
		if got := reportRows(body); !reflect.DeepEqual(got, rows) && !(len(got) == 0 && len(rows) == 0) {
			t.Errorf("%s as %s: rows %v, want %v", path, reader, got, rows)
		}
		if m := body["summary"].(map[string]any)["matchingReceipts"]; m != float64(len(rows)) {
			t.Errorf("%s as %s: matchingReceipts %v, want %d", path, reader, m, len(rows))
		}
	}
	for _, c := range cases {
		t.Run(c.reader+"?"+c.query, func(t *testing.T) { check(t, c.reader, c.query, c.rows) })
	}

	// Receipts no report can project: B's forged one, one whose capability
	// has no lineage, bytes that are not a receipt. They fail the reports
	// of those who may see them, and no one else's.
	f.receipt(t, otherPriv, f.B, "rcpt-B-forged", 1005)
	f.receipt(t, kernelPriv, &tenant{tok: &schemas.CapabilityToken{CapabilityBody: schemas.CapabilityBody{ID: "cap-no-lineage",
		Subject: pubHex(keyA), Issuer: pubHex(trustedIssuer)}}, server: "srv-A", tool: "tool-alpha-A", secret: "secret-argument-A"}, "rcpt-orphan", 1006)
	f.h.receipt("rcpt-garbage", f.leaf, []byte(`{"secret":"secret-argument-B"`))
	f.leaf++
	f.h.caughtUp(f.r)
	for _, c := range []struct{ reader, query string }{
		{"A", ""}, {"A", "capabilityId=cap-A-root"}, {"C", ""}, {"tenant-A", ""}, {"auditor", ""},
		{"B", "capabilityId=cap-A-root"},
	} {
		var rows []string
		for _, tc := range cases {
			if tc.reader == c.reader && tc.query == c.query {
				rows = tc.rows
			}
		}
		t.Run("unprojectable/"+c.reader+"?"+c.query, func(t *testing.T) { check(t, c.reader, c.query, rows) })
	}
	for _, c := range []struct{ reader, query, receipt string }{
		{"B", "", "rcpt-B-forged"},
		{"operator", "capabilityId=cap-B-root", "rcpt-B-forged"},
		{"operator", "", "rcpt-B-forged"},
		{"operator", "capabilityId=cap-no-lineage", "rcpt-orphan"},
	} {
		code, body, raw := f.get(t, "/v1/reports/authorization-context?"+c.query, f.readers[c.reader])
		if code != http.StatusUnprocessableEntity || body["code"] != CodeUnprojectable || body["receiptId"] != c.receipt {
			t.Errorf("%s as %s: %d %s, want 422 naming %s", c.query, c.reader, code, raw, c.receipt)
		}
	}
}

// TestRevokedReaderIsRefused: a reader whose capability is revoked is
// refused, and its delegate with it.
func TestRevokedReaderIsRefused(t *testing.T) {
	f := newScopeFixture(t)
	rev, _ := json.Marshal(schemas.Revocation{CapabilityID: "cap-A-root", RevokedAt: uint64(time.Now().Unix()), Reason: "test"})
	if _, err := f.kv.Put(f.h.ctx, schemas.KVKey("cap-A-root"), rev); err != nil {
		t.Fatal(err)
	}
	for _, reader := range []string{"A", "C"} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			code, body, raw := f.get(t, "/v1/tasks", f.readers[reader])
			if code == http.StatusUnauthorized && body["code"] == CodeUnauthorized {
				f.noLeak(t, "anonymous", "/v1/tasks", raw, "cap-A-root")
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s after the revocation of cap-A-root: %d %s", reader, code, raw)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, _, raw := f.get(t, "/v1/tasks", f.readers["B"]); code != http.StatusOK {
		t.Errorf("B after A's revocation: %d %s", code, raw)
	}
}

// TestAncestryIsFoldedAndRebuilt: the principals learned from decision
// events are part of the store's state, so a rebuild reproduces them.
func TestAncestryIsFoldedAndRebuilt(t *testing.T) {
	f := newScopeFixture(t)
	anc, err := ownerAncestry(f.r.store.db, f.pC)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(anc, []string{f.pA, f.pC}) {
		t.Fatalf("ancestry of C's principal %v, want [A, C]", anc)
	}
	if anc, _ := ownerAncestry(f.r.store.db, "unverified:x"); !reflect.DeepEqual(anc, []string{"unverified:x"}) {
		t.Fatalf("ancestry of an unverified owner: %v", anc)
	}
	got, err := f.r.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if res := f.h.rebuild("rebuilt"); res.Digest != got {
		t.Fatalf("live digest %s, rebuilt %s", got, res.Digest)
	}
}
