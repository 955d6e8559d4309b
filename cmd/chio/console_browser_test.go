package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/schemas"
)

// xssText is a tool argument that would run script if the console rendered
// receipt content as markup.
const xssText = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script>`

// consoleTenant is a tenant's leaf capability (invoke only, so a bearer
// token: what the console can present) and the receipts of its calls.
type consoleTenant struct {
	token, principal string
	receipts         []string
}

// issueTenant issues a capability for hello_task from chio up's issuer.
func issueTenant(t *testing.T, up *upProcess, id string) *consoleTenant {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(up.dir, "keys", issuerKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := schemas.ParsePrivateKey(string(text))
	if err != nil {
		t.Fatal(err)
	}
	ag := newAgent(t)
	now := uint64(time.Now().Unix())
	ag.tok, err = schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject: ag.pub, Scope: schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task",
			Operations: []schemas.Operation{schemas.OpInvoke}}}}, IssuedAt: now - 5, ExpiresAt: now + 3600})
	if err != nil {
		t.Fatal(err)
	}
	return &consoleTenant{token: ag.header(t), principal: schemas.Principal(ag.tok.Issuer, ag.pub)}
}

// call makes one governed A2A call under the tenant's capability; chain,
// if given, is the intent's call chain (asserted: made on behalf of it).
func (c *consoleTenant) call(t *testing.T, up *upProcess, text string, chain map[string]any) string {
	t.Helper()
	ctx := context.Background()
	base, err := url.Parse(up.httpURL)
	if err != nil {
		t.Fatal(err)
	}
	client, err := a2aclient.NewFromEndpoints(ctx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Transport: bearerTransport{token: c.token, origin: base}, Timeout: 30 * time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(text))
	intent := map[string]any{"id": "intent-" + text, "server_id": "hello-a2a-srv", "tool_name": "hello_task", "purpose": "console test " + text}
	if chain != nil {
		intent["call_chain"] = chain
	}
	msg.Metadata = map[string]any{"chio": map[string]any{"governedIntent": intent}}
	res, err := client.SendMessage(ctx, &a2apb.SendMessageRequest{Message: msg})
	if err != nil {
		t.Fatal(err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		t.Fatalf("A2A call: %+v", res)
	}
	rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
	if task.Status.State != a2apb.TaskStateCompleted || rid == "" {
		t.Fatalf("A2A call: task %+v", task)
	}
	c.receipts = append(c.receipts, rid)
	return rid
}

// tamperProxy is a reverse proxy in front of chio up that changes what
// the console verifies, by mode: "path" changes the first audit-path hash,
// "leaf" the leaf hash, "receipt" a byte of the receipt in every answer of
// GET /v1/receipts/{id}, "receipt-first" only in the first answer since
// setMode and "receipt-later" in every answer but the first; "cosign" adds
// witness's cosignature to the proof's checkpoint, as a log serving a
// witnessed checkpoint would. It counts the receipt answers, and can hold
// one request back until the test releases it (holdNext).
type tamperProxy struct {
	mode     atomic.Value
	receipts atomic.Int32 // answers of GET /v1/receipts/{id} since setMode
	held     atomic.Pointer[heldRequest]
	url      string
	logKey   note.Verifier
	witness  *evidenceCosigner
}

// heldRequest is a request the proxy holds: arrived is closed when it
// comes, release lets it through, done is closed when it has been answered.
type heldRequest struct {
	prefix                 string
	arrived, release, done chan struct{}
	once                   sync.Once
}

func (h *heldRequest) let() { h.once.Do(func() { close(h.release) }) }

func newTamperProxy(t *testing.T, target string) *tamperProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &tamperProxy{}
	p.mode.Store("")
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(res *http.Response) error {
		mode, path := p.mode.Load().(string), res.Request.URL.Path
		if res.StatusCode != http.StatusOK || !strings.HasPrefix(path, "/v1/receipts/") || path == "/v1/receipts/query" || strings.HasSuffix(path, "/tlog-proof") {
			return nil
		}
		proof := strings.HasSuffix(path, "/inclusion-proof")
		if !proof {
			if n := p.receipts.Add(1); (mode == "receipt-first" && n > 1) || (mode == "receipt-later" && n == 1) {
				return nil
			}
		}
		if mode == "" || strings.HasPrefix(mode, "receipt") == proof {
			return nil
		}
		body, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if body, err = p.tamper(mode, body); err != nil {
			return err
		}
		res.Body = io.NopCloser(bytes.NewReader(body))
		res.ContentLength = int64(len(body))
		res.Header.Set("Content-Length", strconv.Itoa(len(body)))
		return nil
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := p.held.Load(); h != nil && strings.HasPrefix(r.URL.Path, h.prefix) && p.held.CompareAndSwap(h, nil) {
			close(h.arrived)
			<-h.release
			rp.ServeHTTP(w, r)
			close(h.done)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// setMode changes what the proxy tampers with and restarts the count of
// receipt answers.
func (tp *tamperProxy) setMode(mode string) {
	tp.receipts.Store(0)
	tp.mode.Store(mode)
}

// holdNext holds the next request whose path starts with prefix until
// its let is called (at the latest when the test ends).
func (tp *tamperProxy) holdNext(t *testing.T, prefix string) *heldRequest {
	h := &heldRequest{prefix: prefix, arrived: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(h.let)
	tp.held.Store(h)
	return h
}

func (tp *tamperProxy) tamper(mode string, body []byte) ([]byte, error) {
	if strings.HasPrefix(mode, "receipt") {
		// One byte of the signed receipt: the tool's name.
		out := bytes.Replace(body, []byte(`"tool_name":"hello_task"`), []byte(`"tool_name":"hellO_task"`), 1)
		if bytes.Equal(out, body) {
			return nil, fmt.Errorf("tamper: no tool_name in %s", body)
		}
		return out, nil
	}
	var p map[string]any
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, err
	}
	flip := func(h string) string { // the last hex digit, changed
		if strings.HasSuffix(h, "0") {
			return h[:len(h)-1] + "1"
		}
		return h[:len(h)-1] + "0"
	}
	switch path, _ := p["audit_path"].([]any); {
	case mode == "cosign":
		n, err := note.Open([]byte(p["checkpoint"].(string)), note.VerifierList(tp.logKey))
		if err != nil {
			return nil, err
		}
		cosigned, err := note.Sign(n, tp.witness)
		if err != nil {
			return nil, err
		}
		p["checkpoint"] = string(cosigned)
	case mode == "path" && len(path) > 0:
		path[0] = flip(path[0].(string))
	case mode == "leaf" || mode == "path":
		p["leaf_hash"] = flip(p["leaf_hash"].(string))
	}
	return json.Marshal(p)
}

// TestConsoleBrowser drives the web console in headless Chromium against
// a real chio up: sign-in and what each credential sees, in-page receipt
// verification (and its failure on a tampered proof, leaf hash or
// receipt), pinned keys, the overview charts, script in tool arguments
// shown as text, the task timeline and the authorization report. It saves
// a screenshot of each page.
func TestConsoleBrowser(t *testing.T) {
	browser := newBrowser(t)
	shots := screenshotDir(t)
	provider := authtest.StartIssuer(t)
	up := startUp(t, "--oidc-issuer", provider.URL, "--oidc-audience", "console", "--oidc-grant", "sub=agent-console:hello-a2a-srv/*",
		"--gateway-listen", "127.0.0.1:0")
	keysDir := filepath.Join(up.dir, "keys")

	// A call with an identity provider's access token, whose receipt
	// page names the caller.
	jwtClient, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(&http.Client{Timeout: 30 * time.Second, Transport: bearer{next: http.DefaultTransport,
			token: provider.Sign(t, map[string]any{"iss": provider.URL, "sub": "agent-console", "aud": "console", "client_id": "console-client",
				"exp": time.Now().Add(time.Hour).Unix(), "act": map[string]any{"sub": "planner-<b>"}})}}))
	if err != nil {
		t.Fatal(err)
	}
	jwtTask := sendTask(t, jwtClient, "from agent-console")
	jwtID, _ := jwtTask.Metadata["chio"].(map[string]any)["receiptId"].(string)

	// Two tenants' governed calls, calls under the dev capability (one
	// with script in its argument) and some denials, for the charts.
	alice, bob := issueTenant(t, up, "cap-console-alice"), issueTenant(t, up, "cap-console-bob")
	alice.call(t, up, "alice-1", nil)
	alice.call(t, up, "alice-2", nil)
	bobParent := bob.call(t, up, "bob-1", nil)
	// Bob's second call says it was made on behalf of his first.
	bob.call(t, up, "bob-2", map[string]any{"chain_id": "chain-console", "parent_request_id": "req-bob-1",
		"parent_receipt_id": bobParent, "origin_subject": "origin-agent", "delegator_subject": "delegator-agent"})
	xssID, _ := upToolCall(t, up, "call_console_xss", "hello_task", `{"text":`+strconv.Quote(xssText)+`}`)
	plainID, _ := upToolCall(t, up, "call_console_1", "hello_task", `{"text":"world"}`)
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Edge)
	js, _ := jetstream.New(nc)
	s := upSigner(t, filepath.Join(up.dir, "keys"))
	denied := []string{publishCall(t, js, s, schemas.VerdictDeny), publishCall(t, js, s, schemas.VerdictDeny)}
	all := slices.Concat(alice.receipts, bob.receipts, []string{xssID, plainID}, denied)
	for _, id := range all {
		waitStatus(t, up.token, up.httpURL+"/v1/receipts/"+id, http.StatusOK)
	}

	tab := newTab(t, browser, up.httpURL, shots)
	listed := func() []string {
		t.Helper()
		tab.open("#/receipts")
		return tab.attrs("#receipt-table tr[data-receipt-id]", "data-receipt-id")
	}

	t.Run("operator sees every receipt", func(t *testing.T) {
		tab.t = t
		tab.signIn(up.token)
		ids := listed()
		for _, id := range all {
			if !slices.Contains(ids, id) {
				t.Errorf("operator's list lacks %s: %v", id, ids)
			}
		}
		tab.screenshot("receipts")
		// The search: by outcome, by principal, by time (Unix seconds).
		future := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
		for route, want := range map[string][]string{
			"#/receipts?outcome=deny":                                  denied,
			"#/receipts?principal=" + url.QueryEscape(alice.principal): alice.receipts,
			"#/receipts?toolServer=hello&toolName=hello_task":          denied,
			"#/receipts?since=" + future:                               nil,
		} {
			tab.open(route)
			if ids := tab.attrs("#receipt-table tr[data-receipt-id]", "data-receipt-id"); !slices.Equal(sorted(ids), sorted(want)) {
				t.Errorf("%s lists %v, want %v: %.300s", route, ids, want, tab.text("#receipt-results"))
			}
		}
		tab.signOut()
	})

	t.Run("tenants see only their own receipts", func(t *testing.T) {
		tab.t = t
		// A credential the API refuses: its answer, as text.
		tab.signIn("not-a-capability")
		tab.open("#/receipts")
		if txt := tab.text("main"); !strings.Contains(txt, "401") || !strings.Contains(txt, "sign in again") {
			t.Errorf("a refused credential: %.300s", txt)
		}
		tab.signOut()
		for _, c := range []struct {
			name        string
			who, others *consoleTenant
		}{{"alice", alice, bob}, {"bob", bob, alice}} {
			tab.signIn(c.who.token)
			if ids := listed(); !slices.Equal(sorted(ids), sorted(c.who.receipts)) {
				t.Errorf("%s's list is %v, want exactly %v", c.name, ids, c.who.receipts)
			}
			// Another's receipt answers as one that does not exist.
			tab.open("#/receipts/" + c.others.receipts[0])
			if txt := tab.text("main"); !strings.Contains(txt, "404") || strings.Contains(txt, "hello-a2a-srv/hello_task") {
				t.Errorf("%s opens another tenant's receipt: %.500s", c.name, txt)
			}
			// The call statistics cover every tenant: the page says why it shows none.
			tab.open("#/")
			if txt := tab.text("#charts"); !strings.Contains(txt, "only readers of every receipt") {
				t.Errorf("%s's overview: %.300s", c.name, txt)
			}
			tab.signOut()
		}
	})

	kernelPub := strings.TrimSpace(readFile(t, filepath.Join(keysDir, kernelPubFile)))
	logVKey := strings.TrimSpace(readFile(t, filepath.Join(keysDir, checkpointVKeyFile)))
	origin := logVKey[:strings.Index(logVKey, "+")]

	t.Run("a receipt verifies in the page", func(t *testing.T) {
		tab.t = t
		tab.signIn(up.token)
		for _, id := range []string{alice.receipts[0], plainID, denied[0]} {
			tab.open("#/receipts/" + id + "?verify=1")
			if v := tab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"ok"}) {
				t.Fatalf("receipt %s: data-verify %v: %s", id, v, tab.text("#verify-output"))
			}
			txt := tab.text("#verify-result")
			for _, want := range []string{kernelPub, origin, "size ", "against the server's own keys"} {
				if !strings.Contains(txt, want) {
					t.Errorf("receipt %s: the result does not name %q: %s", id, want, txt)
				}
			}
		}
		tab.open("#/receipts/" + alice.receipts[0] + "?verify=1")
		tab.screenshot("receipt-verified")
		// A receipt's call chain links its parent receipt; its holder binding is named.
		tab.open("#/receipts/" + bob.receipts[1])
		if links := tab.attrs(`#call-chain a[href="#/receipts/`+bobParent+`"]`, "href"); len(links) != 1 || !strings.Contains(tab.text("#call-chain"), "delegator-agent") {
			t.Errorf("the call chain of %s: %s", bob.receipts[1], tab.text("#call-chain"))
		}
		if txt := tab.text("#binding"); !strings.Contains(txt, "the token alone (bearer)") {
			t.Errorf("holder binding: %s", txt)
		}
		if txt := tab.text("#identity"); !strings.Contains(txt, "presented a chio capability") {
			t.Errorf("a capability caller's identity section: %s", txt)
		}
		// An access-token caller's receipt names who it was, the actor as
		// text.
		waitStatus(t, up.token, up.httpURL+"/v1/receipts/"+jwtID, http.StatusOK)
		tab.open("#/receipts/" + jwtID)
		txt := tab.text("#identity")
		for _, want := range []string{"agent-console", provider.URL, "console-client", "planner-<b>", "bearer token"} {
			if !strings.Contains(txt, want) {
				t.Errorf("the identity of %s does not name %q: %s", jwtID, want, txt)
			}
		}
		tab.screenshot("receipt-identity")
		// The certified edge that decided, from metadata.edge.
		if txt := tab.text("#receipt-edge"); !strings.Contains(txt, "edge chio-up · credential edge.chio-up.") {
			t.Errorf("deciding edge: %s", txt)
		}

		// A call a gateway carried out (an AuthZEN evaluation): the page
		// says its result was not observed.
		addr := regexp.MustCompile(`gateway decisions  http://([0-9.:]+)`).FindStringSubmatch(up.out)
		if addr == nil {
			t.Fatalf("no gateway address in:\n%s", up.out)
		}
		dev := devToken(t, up)
		c := parsedCapability(t, dev)
		d := discoverPDP(t, "http://"+addr[1]).evaluate(fmt.Sprintf(`{"subject":{"type":"agent","id":%q,"properties":{"token":%q}},`+
			`"action":{"name":"tools/call"},"resource":{"type":"tool","id":%q}}`, c.Subject, dev, "hello_task"))
		if !d.Decision {
			t.Fatalf("evaluation: %+v", d)
		}
		waitStatus(t, up.token, up.httpURL+"/v1/receipts/"+d.Context.ReceiptID, http.StatusOK)
		tab.open("#/receipts/" + d.Context.ReceiptID)
		if txt := tab.text("#receipt-result"); !strings.Contains(txt, "not observed") {
			t.Errorf("a gateway's call: %q", txt)
		}
	})

	t.Run("tampering fails verification", func(t *testing.T) {
		proxy := newTamperProxy(t, up.httpURL)
		ptab := newTab(t, browser, proxy.url, shots)
		ptab.signIn(up.token)
		for mode, reason := range map[string]string{
			"path":    "audit path does not lead to the checkpoint's root",
			"leaf":    "leaf hash is not the proof's leaf_hash",
			"receipt": "signature does not verify",
		} {
			proxy.setMode(mode)
			ptab.open("#/receipts/" + plainID + "?verify=1")
			if v := ptab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"failed"}) || !strings.Contains(ptab.text("#verify-result"), reason) {
				t.Errorf("tampered %s: data-verify %v: %s", mode, v, ptab.text("#verify-result"))
			}
			if mode == "path" {
				ptab.screenshot("receipt-tampered")
			}
		}
		proxy.setMode("")
		ptab.open("#/receipts/" + plainID + "?verify=1")
		if v := ptab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"ok"}) {
			t.Errorf("through the proxy untampered: %v %s", v, ptab.text("#verify-result"))
		}
	})

	// The page fetches the receipt once and draws and verifies those bytes:
	// a server answering a doctored copy once and the genuine one after
	// (or the other way round) cannot put "Verified" beside content that
	// was not verified.
	t.Run("the page shows the receipt it verified", func(t *testing.T) {
		proxy := newTamperProxy(t, up.httpURL)
		ptab := newTab(t, browser, proxy.url, shots)
		ptab.signIn(up.token)
		for _, c := range []struct{ mode, tool, verify string }{
			{"receipt-first", "/hellO_task", "failed"}, // the doctored copy, shown and failed
			{"receipt-later", "/hello_task", "ok"},     // the genuine copy, shown and verified
		} {
			proxy.setMode(c.mode)
			ptab.open("#/receipts/" + plainID + "?verify=1")
			check := func(when string) {
				t.Helper()
				shown, v, res := ptab.text("#receipt-tool"), ptab.attrs("[data-verify]", "data-verify"), ptab.text("#verify-result")
				if !strings.HasSuffix(shown, c.tool) || !strings.Contains(eval[string](ptab, `document.querySelector('main details pre')?.textContent ?? ''`), `"tool_name": "`+c.tool[1:]+`"`) ||
					!slices.Equal(v, []string{c.verify}) {
					t.Errorf("%s, %s: shows tool %q, data-verify %v, want %s and %s: %s", c.mode, when, shown, v, c.tool, c.verify, res)
				}
				if c.verify == "failed" && !strings.Contains(res, "signature does not verify") {
					t.Errorf("%s, %s: %s", c.mode, when, res)
				}
				if n := proxy.receipts.Load(); n != 1 {
					t.Errorf("%s, %s: the page fetched the receipt %d times, want once", c.mode, when, n)
				}
			}
			check("on load")
			// Verify again with the button: the same bytes, not a new fetch.
			eval[bool](ptab, `document.getElementById('verify-result').dataset.old = '1', true`)
			if err := doSteps(ptab, clickID("verify")); err != nil {
				t.Fatal(err)
			}
			ptab.waitJS(`document.querySelector('#verify-result:not([data-old])')`)
			check("verified again")
		}
	})

	// A page still waiting for an answer when the user moves on must not
	// draw it into the page that is now shown.
	t.Run("a slow page does not draw into the next", func(t *testing.T) {
		proxy := newTamperProxy(t, up.httpURL)
		ptab := newTab(t, browser, proxy.url, shots)
		ptab.signIn(up.token)
		for _, c := range []struct{ route, path, next, nextPage, stale string }{
			{"#/tasks", "/v1/tasks", "#/authz", "authz", "#task-table"},
			{"#/receipts/" + bob.receipts[1], "/v1/lineage/", "#/tasks", "tasks", "#lineage, details, #receipt-summary"},
			{"#/authz", "/v1/reports/authorization-context", "#/keys", "keys", "#authz-summary, #authz-table, .error-box"},
		} {
			held := proxy.holdNext(t, c.path)
			ptab.navigate(c.route)
			select {
			case <-held.arrived:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s never asked for %s", c.route, c.path)
			}
			eval[bool](ptab, `location.hash = `+jsString(c.next)+`, true`)
			ptab.waitJS(`document.getElementById('main')?.dataset.loaded === ` + jsString(c.nextPage))
			held.let()
			<-held.done
			// Until the page has the late answer, and a moment to draw it.
			ptab.waitJS(`performance.getEntriesByType('resource').some((e) => new URL(e.name).pathname.startsWith(` + jsString(c.path) + `))`)
			time.Sleep(300 * time.Millisecond)
			stale := eval[int](ptab, `document.querySelectorAll(`+jsString("main :is("+c.stale+")")+`).length`)
			if page := eval[string](ptab, `document.getElementById('main').dataset.loaded`); stale != 0 || page != c.nextPage {
				t.Errorf("%s answered after moving to %s: %d of its elements drawn, page %q: %.500s", c.route, c.next, stale, page, ptab.text("main"))
			}
			ptab.checkProblems(c.route + " then " + c.next)
		}
	})

	t.Run("witness cosignatures", func(t *testing.T) {
		proxy := newTamperProxy(t, up.httpURL)
		proxy.logKey, proxy.witness = mustVerifier(t, logVKey), newEvidenceCosigner(t, "w1.example")
		proxy.setMode("cosign")
		ptab := newTab(t, browser, proxy.url, shots)
		ptab.signIn(up.token)
		other := newEvidenceCosigner(t, "w2.example")
		for _, c := range []struct {
			pinned []string
			want   string
			text   string
		}{
			{[]string{proxy.witness.vkey}, "ok", "w1.example at "},
			{nil, "ok", "w1.example (no pinned key)"},
			{[]string{proxy.witness.vkey, other.vkey}, "failed", "no cosignature by witness w2.example"},
		} {
			pins, _ := json.Marshal(map[string]any{"logKey": logVKey, "kernelKey": kernelPub, "witnessKeys": c.pinned})
			ptab.open("#/keys")
			eval[bool](ptab, `localStorage.setItem('chio.pins', `+jsString(string(pins))+`), true`)
			ptab.open("#/receipts/" + plainID + "?verify=1")
			if v, txt := ptab.attrs("[data-verify]", "data-verify"), ptab.text("#verify-result"); !slices.Equal(v, []string{c.want}) || !strings.Contains(txt, c.text) {
				t.Errorf("witnesses %v pinned: data-verify %v, want %s naming %q: %s", c.pinned, v, c.want, c.text, txt)
			}
		}
	})

	t.Run("script in a tool argument is shown as text", func(t *testing.T) {
		tab.t = t
		tab.open("#/receipts/" + xssID + "?verify=1")
		if pwned := eval[bool](tab, `window.__pwned !== undefined`); pwned {
			t.Fatal("script in a receipt ran in the console")
		}
		if txt := tab.text("#parameters"); !strings.Contains(txt, `<script>window.__pwned=1</script>`) || !strings.Contains(txt, `<img src=x onerror=`) {
			t.Errorf("the argument is not shown literally: %s", txt)
		}
		if n := eval[int](tab, `document.querySelectorAll('main img, main script').length`); n != 0 {
			t.Errorf("%d img or script elements in the page", n)
		}
		if v := tab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"ok"}) {
			t.Errorf("the receipt with markup in its argument: %v %s", v, tab.text("#verify-result"))
		}
	})

	t.Run("pinned keys", func(t *testing.T) {
		tab.t = t
		pin := func(logKey string) {
			t.Helper()
			tab.open("#/keys")
			// By script: SetValue refuses an empty value, and "" unpins the log key.
			eval[bool](tab, `document.getElementById('pin-log').value = `+jsString(logKey)+`, true`)
			if err := doSteps(tab, setValue("pin-kernel", kernelPub), clickID("pin-save")); err != nil {
				t.Fatal(err)
			}
			tab.waitJS(`document.getElementById('pin-status')?.className === 'ok'`)
		}
		// The kernel key alone pinned: the checkpoint was still checked
		// against the server's own log key, and the page says so.
		pin("")
		tab.open("#/receipts/" + bob.receipts[0] + "?verify=1")
		if v, txt := tab.attrs("[data-verify]", "data-verify"), tab.text("#verify-result"); !slices.Equal(v, []string{"ok"}) ||
			!strings.Contains(txt, "The log key is not pinned") || !strings.Contains(txt, "server's own keys (its log key)") {
			t.Errorf("with only the kernel key pinned: %v %s", v, txt)
		}
		pin(logVKey)
		tab.screenshot("keys")
		tab.open("#/receipts/" + bob.receipts[0] + "?verify=1")
		txt := tab.text("#verify-result")
		if v := tab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"ok"}) || !strings.Contains(txt, "(pinned)") || strings.Contains(txt, "server's own keys") {
			t.Errorf("with the right keys pinned: %v %s", v, txt)
		}
		tab.screenshot("receipt-verified-pinned")
		_, wrong, err := note.GenerateKey(rand.Reader, origin) // the same name, another key
		if err != nil {
			t.Fatal(err)
		}
		pin(wrong)
		tab.open("#/receipts/" + bob.receipts[0] + "?verify=1")
		if v := tab.attrs("[data-verify]", "data-verify"); !slices.Equal(v, []string{"failed"}) || !strings.Contains(tab.text("#verify-result"), "no signature by log key") {
			t.Errorf("with a wrong log key pinned: %v %s", v, tab.text("#verify-result"))
		}
		tab.open("#/keys")
		if err := doSteps(tab, clickID("pin-clear")); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("overview charts", func(t *testing.T) {
		tab.t = t
		// Until the statistics count every call (the minute may turn between them).
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			var st struct {
				Series []struct{ Allow, Deny int } `json:"series"`
			}
			_, body := httpGetAs(t, up.token, up.httpURL+"/v1/stats/calls")
			_ = json.Unmarshal(body, &st)
			n := 0
			for _, b := range st.Series {
				n += b.Allow + b.Deny
			}
			if n >= len(all) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the call statistics count %d of %d calls: %.300s", n, len(all), body)
			}
		}
		tab.open("#/")
		counts := func(chart string) (n int) {
			for _, c := range tab.attrs(`svg[data-chart="`+chart+`"] rect[data-count]`, "data-count") {
				v, _ := strconv.Atoi(c)
				n += v
			}
			return n
		}
		if n := counts("calls"); n < len(all) {
			t.Errorf("the calls chart counts %d calls, want at least %d", n, len(all))
		}
		if n := counts("denials-by-guard"); n != len(denied) {
			t.Errorf("the denials-by-guard chart counts %d, want %d", n, len(denied))
		}
		if n := counts("denials-by-tool"); n != len(denied) {
			t.Errorf("the denials-by-tool chart counts %d, want %d", n, len(denied))
		}
		// Names are agents': "__proto__" and "constructor" are counted like any other.
		got := eval[string](tab, `import('./charts.js').then(({ byName, stackedBars, legend }) => {
			const g = byName([{ t: 0, tool: '__proto__', count: 2 }, { t: 60, tool: 'constructor', count: 3 }, { t: 0, tool: 'x', count: 1 }], 'tool');
			const rects = stackedBars('test', g.points, g.keys, { since: 0, until: 120, bucket: 60 }).querySelectorAll('rect[data-count]');
			return JSON.stringify([g.keys, Array.from(rects, (r) => r.dataset.key + '=' + r.dataset.count + ' ' + r.getAttribute('fill')), legend(g.keys, g.totals).textContent]);
		})`, chromedp.EvalAwaitPromise)
		if want := `[["constructor","__proto__","x"],["__proto__=2 #ae3ec9","x=1 #f76707","constructor=3 #1c7ed6"],"constructor (3)__proto__ (2)x (1)"]`; got != want {
			t.Errorf("charts of names __proto__ and constructor: %s, want %s", got, want)
		}
		if txt := tab.text("#log-status"); !strings.Contains(txt, origin) {
			t.Errorf("log status: %s", txt)
		}
		tab.screenshot("overview")
	})

	t.Run("task timeline", func(t *testing.T) {
		tab.t = t
		tab.open("#/tasks")
		tasks := tab.attrs("#task-table tr[data-task-id]", "data-task-id")
		if len(tasks) == 0 {
			t.Fatalf("no tasks listed: %s", tab.text("main"))
		}
		tab.open("#/tasks/" + tasks[0])
		if links := tab.attrs(`main a[href^="#/receipts/"]`, "href"); len(links) == 0 {
			t.Errorf("the task page links no receipt: %s", tab.text("main"))
		}
		if code, _ := httpGetAs(t, up.token, up.httpURL+"/v1/tasks/"+tasks[0]+"/timeline"); code == http.StatusOK {
			if n := len(tab.attrs("li.generation", "data-generation")); n == 0 {
				t.Errorf("no generations drawn: %s", tab.text("#timeline"))
			}
		} else {
			t.Logf("GET /v1/tasks/{id}/timeline answers %d: the page says so", code)
		}
		tab.screenshot("task")
	})

	t.Run("authorization report", func(t *testing.T) {
		tab.t = t
		waitBody(t, up.token, up.httpURL+"/v1/reports/authorization-context", `"matchingReceipts":4`)
		tab.open("#/authz")
		rows := tab.attrs("#authz-table tr[data-receipt-id]", "data-receipt-id")
		if !slices.Equal(sorted(rows), sorted(slices.Concat(alice.receipts, bob.receipts))) {
			t.Errorf("report rows %v: %s", rows, tab.text("main"))
		}
		// Bob's chained call drawn as nested boxes down to the call, its parent linked.
		if n := len(tab.attrs("#authz-chains .chain-box", "class")); n != 4 {
			t.Errorf("the call chain has %d boxes, want 4: %s", n, tab.text("#authz-chains"))
		}
		if links := tab.attrs(`#authz-chains a[href="#/receipts/`+bobParent+`"]`, "href"); len(links) != 1 {
			t.Errorf("the chain does not link its parent %s: %s", bobParent, tab.text("#authz-chains"))
		}
		tab.screenshot("authz")
	})
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// chio projections serves the console too, pointed at a ledger on another
// origin (--console-ledger-url), which its CSP lets the page reach; a URL
// that is not an origin fails the start.
func TestConsoleServedByProjections(t *testing.T) {
	ns, err := natsembed.Start(natsembed.Config{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Stop)
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	kernel := schemas.EncodePublicKey(pub)
	args := []string{"projections", "--nats", ns.ClientURL(), "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0",
		"--service-token", "tok", "--kernel-key", kernel}
	if _, err := chio(context.Background(), append(args, "--console-ledger-url", "https://ledger.example/v1")...); err == nil ||
		!strings.Contains(err.Error(), "console ledger URL") {
		t.Fatalf("a ledger URL with a path: %v", err)
	}
	re := regexp.MustCompile(`API on (http://[0-9.:]+)`)
	out, _ := startCommand(t, re, append(args, "--console-ledger-url", "https://ledger.example:8443")...)
	base := re.FindStringSubmatch(out)[1]
	res, err := http.Get(base + "/console/config.json")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	csp := res.Header.Get("Content-Security-Policy")
	if string(body) != `{"ledgerUrl":"https://ledger.example:8443"}` || !strings.Contains(csp, "connect-src 'self' https://ledger.example:8443;") {
		t.Fatalf("config.json: %s, CSP %q", body, csp)
	}
	if code, page := httpGet(t, base+"/console/"); code != http.StatusOK || !strings.Contains(string(page), `<script type="module" src="app.js">`) {
		t.Fatalf("/console/: %d %.200s", code, page)
	}
}
