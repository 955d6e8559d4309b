package acp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// hostileBase is one valid request: template with %s where object, the
// object varied, goes.
type hostileBase struct {
	name, template, object string
}

// hostileBases are valid requests of every method that reads params,
// each with one object varied: the envelope, the params, the arguments,
// params._meta and its capability.
func hostileBases(tok string) []hostileBase {
	const invoke = `{"capabilityId":"read_file","arguments":{"path":"/a"}}`
	meta := `{"chioCapability":"` + tok + `"}`
	metaParams := `{"_meta":` + meta + `,"capabilityId":"search","arguments":{}}`
	envelope := func(method string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":%s}`
	}
	const task = `{"taskId":"0190c3c4-0000-7000-8000-000000000000"}`
	return []hostileBase{
		{"envelope", "%s", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":` + invoke + `}`},
		{"tool/invoke params", envelope(MethodInvoke), invoke},
		{"tool/invoke arguments", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"read_file","arguments":%s}}`, `{"path":"/a"}`},
		{"tool/invoke _meta", envelope(MethodInvoke), metaParams},
		{"tool/invoke _meta members", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"search","arguments":{},"_meta":%s}}`, meta},
		{"tool/stream params", envelope(MethodStream), invoke},
		{"tool/resume params", envelope(MethodResume), task},
		{"tool/cancel params", envelope(MethodCancel), task},
		{"session/request_permission params", envelope(MethodRequestPermission), `{"capabilityId":"read_file"}`},
		{"session/list_capabilities params", envelope(MethodListCapabilities), metaParams},
	}
}

// fill is b's request with doc in place of its object.
func (b hostileBase) fill(doc []byte) []byte {
	before, after, _ := strings.Cut(b.template, "%s")
	return append(append([]byte(before), doc...), after...)
}

// valid is b's request unvaried.
func (b hostileBase) valid() []byte { return b.fill([]byte(b.object)) }

// TestHostileRequests: every hostile variant of a valid request's
// envelope, params, arguments and _meta is a parse error, over HTTP and
// over stdio, and nothing of it is recorded. The valid requests
// themselves are answered (tool/invoke runs), so the table reaches the
// methods it names.
func TestHostileRequests(t *testing.T) {
	f := start(t)
	full := wildcard(t)
	readOnly := token(t, "cap-ro", agentKey, grant("read_file"))
	stdio := serveStdio(t, f, full)
	ran := 0
	for _, b := range hostileBases(full) {
		good := b.valid()
		if err := strictjson.Valid(good); err != nil {
			t.Fatalf("%s: the valid request is not: %v", b.name, err)
		}
		_, raw := f.post(t, readOnly, string(good), nil)
		var a answer
		if err := json.Unmarshal(raw, &a); err != nil || a.code() == CodeParseError || a.code() == CodeInvalidRequest {
			t.Fatalf("%s: the valid request was answered %s", b.name, raw)
		}
		var res struct{ ReceiptID string }
		if a.code() == 0 && json.Unmarshal(a.Result, &res) == nil && res.ReceiptID != "" {
			ran++
		}
		for _, v := range hostilejson.Variants([]byte(b.object)) {
			doc := b.fill(v.Doc)
			t.Run(b.name+"/"+v.Name, func(t *testing.T) {
				status, raw := f.post(t, readOnly, string(doc), nil)
				if a := parseError(t, raw); status != http.StatusOK || a == nil {
					t.Fatalf("HTTP %d: %s", status, raw)
				}
				if a := parseError(t, stdio.send(t, doc)); a == nil {
					t.Fatal("stdio: not a parse error")
				}
			})
		}
	}
	if ran == 0 {
		t.Fatal("no valid tool/invoke ran: the table does not reach the kernel")
	}
	if d, o := natstest.Decisions(t, f.js), natstest.Outcomes(t, f.js); len(d) != ran || len(o) != ran {
		t.Fatalf("%d decisions and %d outcomes for %d valid calls", len(d), len(o), ran)
	}
}

// parseError is the answer in raw if it is one parse error without an id
// whose message quotes nothing of the request; nil otherwise.
func parseError(t *testing.T, raw []byte) *answer {
	t.Helper()
	var a answer
	if err := json.Unmarshal(raw, &a); err != nil {
		t.Errorf("answer %s: %v", raw, err)
		return nil
	}
	if a.code() != CodeParseError || string(a.ID) != "null" {
		t.Errorf("answer %s, want a parse error with id null", raw)
		return nil
	}
	if strings.Contains(a.Error.Message, "read_file") || strings.Contains(a.Error.Message, "zz") {
		t.Errorf("the message quotes the request: %s", a.Error.Message)
	}
	return &a
}

// send writes one raw line and reads one answer line.
func (c *lineClient) send(t *testing.T, line []byte) []byte {
	t.Helper()
	if _, err := c.w.Write(append(bytes.Clone(line), '\n')); err != nil {
		t.Fatal(err)
	}
	if !c.r.Scan() {
		t.Fatalf("no answer: %v", c.r.Err())
	}
	return bytes.Clone(c.r.Bytes())
}

// TestExactNames: JSON-RPC names are case-sensitive. A member that is a
// name the edge reads but for case is refused, not read as that name; a
// capability riding in a case-variant _META beside _meta (encoding/json
// would take the last) is a parse error. Nothing is recorded.
func TestExactNames(t *testing.T) {
	f := start(t)
	full := wildcard(t)
	readOnly := token(t, "cap-ro", agentKey, grant("read_file"))
	cases := []struct {
		name, body string
		code       int
	}{
		{"Method", `{"jsonrpc":"2.0","id":1,"Method":"tool/invoke","params":{"capabilityId":"search"}}`, CodeInvalidRequest},
		{"PARAMS", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","PARAMS":{"capabilityId":"search"}}`, CodeInvalidRequest},
		{"CapabilityId", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"CapabilityId":"search"}}`, CodeInvalidParams},
		{"_META alone", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"search","_META":{"chioCapability":"` + full + `"}}}`, CodeInvalidParams},
		{"ChioCapability", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"search","_meta":{"ChioCapability":"` + full + `"}}}`, CodeInvalidParams},
		{"_META beside _meta", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"search","arguments":{},` +
			`"_meta":{"chioCapability":"` + readOnly + `"},"_META":{"chioCapability":"` + full + `"}}}`, CodeParseError},
		{"TaskId", `{"jsonrpc":"2.0","id":1,"method":"tool/cancel","params":{"TaskId":"x"}}`, CodeInvalidParams},
		{"_meta not an object", `{"jsonrpc":"2.0","id":1,"method":"tool/invoke","params":{"capabilityId":"search","_meta":"x"}}`, CodeInvalidParams},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, raw := f.post(t, readOnly, c.body, nil)
			var a answer
			if err := json.Unmarshal(raw, &a); err != nil || a.code() != c.code {
				t.Fatalf("answered %s, want code %d", raw, c.code)
			}
		})
	}
	if d := natstest.Decisions(t, f.js); len(d) != 0 {
		t.Fatalf("refused requests were recorded: %d decisions", len(d))
	}
}

// TestBatchLimit: a batch of MaxBatch requests is answered; one more and
// the whole batch is refused before any of it runs.
func TestBatchLimit(t *testing.T) {
	f := start(t)
	full := wildcard(t)
	batch := func(n int, method, params string) string {
		var b strings.Builder
		b.WriteByte('[')
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, i, method, params)
		}
		return b.String() + "]"
	}
	status, raw := f.post(t, full, batch(MaxBatch, MethodInitialize, `{}`), nil)
	var all []answer
	if err := json.Unmarshal(raw, &all); status != http.StatusOK || err != nil || len(all) != MaxBatch {
		t.Fatalf("a full batch: HTTP %d, %d answers (%v)", status, len(all), err)
	}
	status, raw = f.post(t, full, batch(MaxBatch+1, MethodInvoke, `{"capabilityId":"read_file","arguments":{"path":"/a"}}`), nil)
	var a answer
	if err := json.Unmarshal(raw, &a); status != http.StatusOK || err != nil || a.code() != CodeInvalidRequest || string(a.ID) != "null" {
		t.Fatalf("a batch over the limit: HTTP %d: %s", status, raw)
	}
	if d := natstest.Decisions(t, f.js); len(d) != 0 {
		t.Fatalf("a refused batch ran: %d decisions", len(d))
	}
}

// TestBatchClientGoesAway: a real HTTP client sends a batch and cancels
// while its first call runs. That call, decided, finishes and is
// recorded; the requests after it never start.
func TestBatchClientGoesAway(t *testing.T) {
	started, release := make(chan struct{}), make(chan struct{})
	srv := testServer1()
	srv.hold = func(inv tools.Invocation) {
		if inv.ToolName == "search" {
			close(started)
			<-release
		}
	}
	f := startWith(t, srv)
	// The edge again, behind a middleware that shows the test the
	// server's side of the request: when it sees the client gone, and
	// when the handler is done.
	requests, handled := make(chan *http.Request, 1), make(chan struct{})
	ec := echo.New()
	ec.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			defer close(handled)
			requests <- c.Request()
			return next(c)
		}
	})
	f.edge.Register(ec)
	hs := httptest.NewServer(ec)
	t.Cleanup(hs.Close)

	body := `[{"jsonrpc":"2.0","id":0,"method":"tool/invoke","params":{"capabilityId":"search","arguments":{}}}`
	for i := 1; i <= 5; i++ {
		body += fmt.Sprintf(`,{"jsonrpc":"2.0","id":%d,"method":"tool/invoke","params":{"capabilityId":"read_file","arguments":{"path":"/a"}}}`, i)
	}
	body += "]"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hs.URL+Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+wildcard(t))
	sent := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		sent <- err
	}()
	<-started
	cancel()
	if err := <-sent; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's request: %v", err)
	}
	<-(<-requests).Context().Done() // the server saw the client go
	close(release)
	<-handled

	ds := natstest.Decisions(t, f.js)
	if len(ds) != 1 {
		t.Fatalf("%d decisions, want the one call that had started", len(ds))
	}
	for rid, d := range ds {
		if d.ToolName != "search" {
			t.Fatalf("decision for %s", d.ToolName)
		}
		if _, ok := natstest.Outcomes(t, f.js)[rid]; !ok {
			t.Fatal("the call that had started has no outcome")
		}
	}
}

// FuzzMessage: no message panics the edge, and a message it does not
// refuse as a parse error is one strictjson accepts; every answer
// encodes.
func FuzzMessage(f *testing.F) {
	fx := start(f)
	full := wildcard(f)
	for _, b := range hostileBases(full) {
		f.Add(b.valid())
		for _, v := range hostilejson.Variants([]byte(b.object)) {
			f.Add(b.fill(v.Doc))
		}
	}
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"initialize"},{"jsonrpc":"2.0","method":"session/list_capabilities"},7]`))
	conn := credential{token: full}
	f.Fuzz(func(t *testing.T, msg []byte) {
		ans := fx.edge.process(context.Background(), conn, msg)
		one, single := ans.(*response)
		parseErr := single && one.Error != nil && one.Error.Code == CodeParseError
		if accepted := strictjson.Valid(bytes.TrimSpace(msg)) == nil; accepted == parseErr {
			t.Fatalf("strictjson accepts it: %v; answered as a parse error: %v", accepted, parseErr)
		}
		if _, err := json.Marshal(ans); err != nil {
			t.Fatalf("answer does not encode: %v", err)
		}
	})
}
