package mcpbridge

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/mcpbridge/mcpbridgetest"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// secret is the operator's credential given to the stdio server in its
// environment; the server can echo it, the bridge must not relay it.
const secret = "op-s3cr3t-value-0123456789"

func TestMain(m *testing.M) {
	mcpbridgetest.MaybeServeStdio()
	os.Exit(m.Run())
}

// fast restarts, so the restart test does not wait long.
var fast = WithRestartBackoff(backoff.Policy{Base: 10 * time.Millisecond, Cap: 100 * time.Millisecond})

// startStdio wraps this test binary run as the test MCP server.
func startStdio(t *testing.T, opts ...Option) *Server {
	t.Helper()
	up := Upstream{Command: []string{os.Args[0], mcpbridgetest.StdioFlag}, Env: []string{"MCPBRIDGE_SECRET=" + secret}}
	s, err := New(context.Background(), "files", up, append([]Option{fast}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// startHTTP wraps the test MCP server served over streamable HTTP.
func startHTTP(t *testing.T, opts ...Option) *Server {
	t.Helper()
	var sawAuth bool
	h := mcpbridgetest.NewHandler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sawAuth = sawAuth || r.Header.Get("Authorization") == "Bearer "+secret
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	s, err := New(context.Background(), "files", Upstream{URL: hs.URL, Headers: http.Header{"Authorization": {"Bearer " + secret}}}, append([]Option{fast}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if !sawAuth {
		t.Fatal("the upstream never saw the operator's header")
	}
	return s
}

func invocation(tool, args string) tools.Invocation {
	return tools.Invocation{ID: uuid.NewString(), ServerID: "files", ToolName: tool, Arguments: json.RawMessage(args)}
}

func toolByName(m *schemas.ToolManifest, name string) *schemas.ToolDefinition {
	for i := range m.Tools {
		if m.Tools[i].Name == name {
			return &m.Tools[i]
		}
	}
	return nil
}

// The upstream's tools/list becomes the manifest: schemas, the annotations
// as hints, deny-by-default for destructive tools, exposure and fidelity.
func TestManifest(t *testing.T) {
	for _, tr := range []struct {
		name  string
		start func(*testing.T, ...Option) *Server
	}{{"stdio", startStdio}, {"http", startHTTP}} {
		t.Run(tr.name, func(t *testing.T) {
			m := tr.start(t).Manifest()
			if err := m.Validate(); err != nil || m.Name != "mcpbridgetest" || m.Version != "1.2.3" || m.ServerID != "files" {
				t.Fatalf("manifest %+v: %v", m, err)
			}
			cases := []struct {
				tool                               string
				readOnly, sideEffects, destructive bool
				deny, structured                   bool
			}{
				{"echo", true, false, false, false, true},
				{"fail", true, false, false, false, false},
				{"write_note", false, true, true, true, false},
				{"update_note", false, true, false, false, false},
				{"add_tool", false, true, true, true, false}, // no annotations: MCP's defaults
			}
			for _, c := range cases {
				d := toolByName(m, c.tool)
				if d == nil {
					t.Fatalf("%s: not in the manifest", c.tool)
				}
				en := &tools.Entry{Manifest: m, Tool: d}
				if d.Annotations.ReadOnly != c.readOnly || d.HasSideEffects != c.sideEffects || d.Annotations.Destructive != c.destructive ||
					en.DenyByDefault() != c.deny {
					t.Errorf("%s: annotations %+v side effects %v deny %v", c.tool, *d.Annotations, d.HasSideEffects, en.DenyByDefault())
				}
				if (string(d.Metadata[MetaStructured]) == "true") != c.structured {
					t.Errorf("%s: structured %s", c.tool, d.Metadata[MetaStructured])
				}
				var fid tools.Fidelity
				if err := json.Unmarshal(d.Metadata[MetaFidelity], &fid); err != nil || fid.Kind != tools.FidelityAdapted || len(fid.Caveats) == 0 {
					t.Errorf("%s: fidelity %s", c.tool, d.Metadata[MetaFidelity])
				}
				for _, p := range Edges() {
					if string(d.Metadata[p+".expose"]) != "true" {
						t.Errorf("%s: %s.expose is %s", c.tool, p, d.Metadata[p+".expose"])
					}
				}
				if h, err := tools.ReadHints(d); err != nil || h.SideEffects != c.sideEffects {
					t.Errorf("%s: hints %+v %v", c.tool, h, err)
				}
			}
			echo := toolByName(m, "echo")
			if !bytes.Contains(echo.InputSchema, []byte(`"text"`)) || !bytes.Contains(echo.OutputSchema, []byte(`"text"`)) {
				t.Fatalf("echo schemas: %s %s", echo.InputSchema, echo.OutputSchema)
			}
		})
	}
}

// WithExpose narrows the edges the tools are exposed on.
func TestExposeNarrowed(t *testing.T) {
	m := startStdio(t, WithExpose("mcp", "openai")).Manifest()
	md := toolByName(m, "echo").Metadata
	if string(md["mcp.expose"]) != "true" || string(md["openai.expose"]) != "true" || md["a2a.expose"] != nil || md["acp.expose"] != nil {
		t.Fatalf("metadata %s", md)
	}
	if _, err := New(context.Background(), "x", Upstream{URL: "http://127.0.0.1:1"}, WithExpose("smtp")); err == nil {
		t.Fatal("an unknown edge was accepted")
	}
}

// governed is a registry, kernel and dispatcher on a real JetStream with
// s registered.
type governed struct {
	reg *tools.Registry
	d   *dispatch.Dispatcher
	js  interface{}
}

var issuerKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, 32))

func capability(t *testing.T, toolNames ...string) string {
	t.Helper()
	var grants []schemas.ToolGrant
	for _, n := range toolNames {
		grants = append(grants, schemas.ToolGrant{ServerID: "files", ToolName: n, Operations: []schemas.Operation{schemas.OpInvoke}})
	}
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{8}, 32))
	now := time.Now()
	tok, err := schemas.IssueCapability(issuerKey, schemas.CapabilityBody{ID: "cap-" + uuid.NewString(),
		Issuer: schemas.EncodePublicKey(issuerKey.Public().(ed25519.PublicKey)), Subject: schemas.EncodePublicKey(agent.Public().(ed25519.PublicKey)),
		Scope: schemas.Scope{Grants: grants}, IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix())})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Governed calls through the dispatcher on a real JetStream: an allowed
// call is completed with its decision and outcome events; isError is a
// failed outcome with the tool's text; a destructive tool is denied under
// a wildcard grant and runs under a grant naming it.
func TestGovernedCalls(t *testing.T) {
	srv := startStdio(t)
	reg := tools.NewRegistry()
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_, _, js := natstest.Start(t)
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{schemas.EncodePublicKey(issuerKey.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := dispatch.New(ctx, js, k, reg, "mcpbridge-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	exp := tools.Exposure{Protocol: "mcp"}
	wildcard, named := capability(t, "*"), capability(t, "write_note")
	cases := []struct {
		name, token, tool, args string
		allow                   bool
		outcome                 schemas.Outcome
		output, reason          string
	}{
		{"read-only tool", wildcard, "echo", `{"text":"hi"}`, true, schemas.OutcomeCompleted, `{"text":"hi"}`, ""},
		{"isError", wildcard, "fail", `{}`, true, schemas.OutcomeFailed, "", "the disk is full"},
		{"destructive under a wildcard", wildcard, "write_note", `{"note":"x"}`, false, "", "", "denied by default unless a grant names it"},
		{"destructive under a grant naming it", named, "write_note", `{"note":"x"}`, true, schemas.OutcomeCompleted, `"written: x"`, ""},
		{"side effects, not destructive", wildcard, "update_note", `{"note":"y"}`, true, schemas.OutcomeCompleted, `"appended: y"`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := d.Do(ctx, dispatch.Call{Token: c.token, ServerID: "files", ToolName: c.tool, Arguments: json.RawMessage(c.args), Exposure: &exp})
			if err != nil {
				t.Fatal(err)
			}
			if res.Decision.Allow != c.allow {
				t.Fatalf("allow %v (%s)", res.Decision.Allow, res.Decision.Reason)
			}
			dec, ok := natstest.Decisions(t, js)[res.ReceiptID]
			if !ok || dec.ToolServer != "files" || dec.ToolName != c.tool {
				t.Fatalf("decision event %+v", dec)
			}
			if !c.allow {
				if !strings.Contains(res.Decision.Reason, c.reason) || res.Ran {
					t.Fatalf("deny %q ran %v", res.Decision.Reason, res.Ran)
				}
				return
			}
			out := natstest.Outcomes(t, js)[res.ReceiptID]
			if out.Outcome != c.outcome || !strings.Contains(out.Reason, c.reason) || !res.OutcomeDurable {
				t.Fatalf("outcome %+v", out)
			}
			if c.output != "" && !strings.Contains(string(res.Output), c.output) {
				t.Fatalf("output %s", res.Output)
			}
		})
	}
}

// An upstream that echoes the operator's credential has it redacted.
func TestCredentialsRedacted(t *testing.T) {
	out, err := startStdio(t).Invoke(context.Background(), invocation("env", `{"name":"MCPBRIDGE_SECRET"}`))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte(secret)) || !bytes.Contains(out, []byte("MCPBRIDGE_SECRET=[REDACTED]")) {
		t.Fatalf("output %s", out)
	}
}

// The values of the URL's query string are the operator's credentials
// too: an answer echoing one has it redacted, raw or decoded.
func TestQueryCredentialsRedacted(t *testing.T) {
	hs := httptest.NewServer(mcpbridgetest.NewHandler())
	t.Cleanup(hs.Close)
	for _, tc := range []struct {
		name, query, echoed string
	}{
		{"plain value", "key=" + secret, secret},
		{"escaped value, echoed decoded", "v=1&key=" + url.QueryEscape(secret+"/+x"), secret + "/+x"},
		{"escaped value, echoed raw", "key=" + url.QueryEscape(secret+"/x"), url.QueryEscape(secret + "/x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(context.Background(), "files", Upstream{URL: hs.URL + "?" + tc.query}, fast)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			args, _ := json.Marshal(map[string]string{"text": "key is " + tc.echoed})
			out, err := s.Invoke(context.Background(), invocation("echo", string(args)))
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(out, []byte(secret)) || !bytes.Contains(out, []byte("[REDACTED]")) {
				t.Fatalf("output %s", out)
			}
		})
	}
}

// A server that dies mid-call fails the call with the reason, then is
// restarted and answers again.
func TestServerDiesAndRestarts(t *testing.T) {
	srv := startStdio(t)
	_, err := srv.Invoke(context.Background(), invocation("crash", `{}`))
	if !errors.Is(err, ErrServerGone) || errors.Is(err, context.Canceled) {
		t.Fatalf("crash: %v", err)
	}
	if err := srv.Up(context.Background()); err != nil {
		t.Fatal(err)
	}
	out, err := srv.Invoke(context.Background(), invocation("echo", `{"text":"again"}`))
	if err != nil || string(out) != `{"text":"again"}` {
		t.Fatalf("after restart: %s %v", out, err)
	}
}

// A call while the upstream is down (here it is not restarted before the
// test ends) is not sent: it fails with ErrServerDown and the reason.
func TestCallWhileDown(t *testing.T) {
	srv := startStdio(t, WithRestartBackoff(backoff.Policy{Base: time.Hour, Cap: time.Hour}))
	if _, err := srv.Invoke(context.Background(), invocation("crash", `{}`)); !errors.Is(err, ErrServerGone) {
		t.Fatalf("crash: %v", err)
	}
	_, err := srv.Invoke(context.Background(), invocation("echo", `{"text":"x"}`))
	if !errors.Is(err, ErrServerDown) {
		t.Fatalf("call while down: %v", err)
	}
}

// notifications/tools/list_changed is followed: a tool the server adds
// appears in the followed registry, and is gone after it removes it.
func TestListChanged(t *testing.T) {
	changes := make(chan *schemas.ToolManifest, 8)
	srv := startStdio(t, WithOnChange(func(m *schemas.ToolManifest) { changes <- m }))
	reg := tools.NewRegistry()
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	if err := srv.Follow(reg); err != nil {
		t.Fatal(err)
	}
	exp := tools.Exposure{Protocol: "a2a"}
	awaitTool := func(present bool) {
		t.Helper()
		// Bounded, so that a change never reported fails here rather
		// than at the test binary's timeout.
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
	wait:
		for {
			select {
			case m := <-changes:
				if (toolByName(m, "extra") != nil) == present {
					break wait
				}
			case <-deadline.C:
				t.Fatalf("no change with extra present %v reported within 30s", present)
			}
		}
		if _, err := reg.Resolve(exp, "files", "extra"); (err == nil) != present {
			t.Fatalf("extra present %v: resolve %v", present, err)
		}
	}
	if _, err := srv.Invoke(context.Background(), invocation("add_tool", `{}`)); err != nil {
		t.Fatal(err)
	}
	awaitTool(true)
	out, err := srv.Invoke(context.Background(), invocation("extra", `{}`))
	if err != nil || string(out) != `{"text":"extra"}` {
		t.Fatalf("extra: %s %v", out, err)
	}
	if _, err := srv.Invoke(context.Background(), invocation("remove_tool", `{}`)); err != nil {
		t.Fatal(err)
	}
	awaitTool(false)
	if _, err := srv.Invoke(context.Background(), invocation("extra", `{}`)); !errors.Is(err, tools.ErrUnknownTool) {
		t.Fatalf("removed tool: %v", err)
	}
}

// Progress notifications are stream chunks, in order, and the output the
// last one. The SDK hands notifications to their handler apart from
// answers, so one sent just before the answer may come after it and is
// then dropped: at least one progress chunk is required, not all.
func TestProgressChunks(t *testing.T) {
	var chunks []tools.Chunk
	err := startStdio(t).InvokeStream(context.Background(), invocation("progress", `{"steps":3}`), func(c tools.Chunk) error {
		chunks = append(chunks, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 2 {
		t.Fatalf("%d chunks, want at least one progress chunk and the output", len(chunks))
	}
	last := chunks[len(chunks)-1]
	if string(last.Data) != `{"text":"done"}` || !last.Last {
		t.Fatalf("last chunk %s", last.Data)
	}
	prev := 0.0
	for _, c := range chunks[:len(chunks)-1] {
		var p struct {
			Progress float64 `json:"progress"`
			Total    float64 `json:"total"`
			Message  string  `json:"message"`
		}
		if err := json.Unmarshal(c.Data, &p); err != nil || p.Progress <= prev || p.Total != 3 || c.Last ||
			p.Message != fmt.Sprintf("step %d", int(p.Progress)) {
			t.Fatalf("progress chunk %s", c.Data)
		}
		prev = p.Progress
	}
}

// Cancelling a call sends notifications/cancelled: the upstream's handler
// sees its context end.
func TestCancelPassedOn(t *testing.T) {
	srv := startStdio(t)
	inv := invocation("block", `{}`)
	err := srv.InvokeStream(context.Background(), inv, func(tools.Chunk) error {
		return srv.Cancel(context.Background(), inv.ID) // it started upstream
	})
	if !errors.Is(err, tools.ErrCanceled) {
		t.Fatalf("block: %v", err)
	}
	out, err := srv.Invoke(context.Background(), invocation("cancelled", `{}`))
	if err != nil || string(out) != `{"count":1}` {
		t.Fatalf("cancelled: %s %v", out, err)
	}
}

// The filter refuses what strictjson refuses and what is too large: an
// answer becomes an error answer to its request, anything else is dropped.
func TestFilter(t *testing.T) {
	f := &filter{max: 64, redactor: nil, log: discard()}
	cases := []struct {
		name, in string
		over     bool
		want     string
	}{
		{"clean", `{"jsonrpc":"2.0","id":1,"result":{}}`, false, `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{"duplicate member", `{"jsonrpc":"2.0","id":2,"result":{"a":1,"a":2}}`, false, `"id":2`},
		{"case variant", `{"jsonrpc":"2.0","id":"x","result":{"a":1,"A":2}}`, false, `"id":"x"`},
		{"oversized", `{"jsonrpc":"2.0","id":3,"result":{"a":"`, true, `larger than 64 bytes`},
		{"notification", `{"jsonrpc":"2.0","method":"n","params":{"a":1,"a":2}}`, false, ``},
		{"no id", `{"a":1,"a":1}`, false, ``},
	}
	for _, c := range cases {
		got := string(f.message([]byte(c.in), c.over))
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%s: %s", c.name, got)
		}
		if c.name != "clean" && c.want != "" && !strings.Contains(got, `"error"`) {
			t.Errorf("%s: not an error answer: %s", c.name, got)
		}
	}
}
