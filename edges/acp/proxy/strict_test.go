package proxy

import (
	"encoding/json"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// varied is one valid message: template with %s where object, the object
// varied, goes.
type varied struct {
	name, template, object string
}

func (v varied) fill(doc []byte) []byte {
	before, after, _ := strings.Cut(v.template, "%s")
	return append(append([]byte(before), doc...), after...)
}

func (v varied) valid() []byte { return v.fill([]byte(v.object)) }

// agentRequests are valid lines of the agent, with the object varied:
// the envelope of a governed request, the params of every kind of
// governed request and the objects nested in them, and a session/update.
func agentRequests(path string) []varied {
	read := `{"sessionId":"s","path":"` + path + `"}`
	req := func(method string) string { return `{"jsonrpc":"2.0","id":5,"method":"` + method + `","params":%s}` }
	return []varied{
		{"envelope", "%s", `{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":` + read + `}`},
		{"fs/read_text_file params", req(MethodRead), read},
		{"fs/write_text_file params", req(MethodWrite), `{"sessionId":"s","path":"` + path + `","content":"x"}`},
		{"terminal/create params", req(MethodTerminal), `{"sessionId":"s","command":"ls","args":["-l"],"env":[{"name":"A","value":"b"}]}`},
		{"terminal/create env", `{"jsonrpc":"2.0","id":5,"method":"terminal/create","params":{"sessionId":"s","command":"ls","env":[%s]}}`, `{"name":"A","value":"b"}`},
		{"terminal/output params", req(MethodOutput), `{"sessionId":"s","terminalId":"t1"}`},
		{"session/request_permission params", req(MethodPermission),
			`{"sessionId":"s","toolCall":{"toolCallId":"c","title":"t"},"options":[{"optionId":"o","name":"Once","kind":"allow_once"}]}`},
		{"session/request_permission toolCall", `{"jsonrpc":"2.0","id":5,"method":"session/request_permission","params":{"sessionId":"s","toolCall":%s,"options":[]}}`,
			`{"toolCallId":"c","title":"t"}`},
		{"session/update params", `{"jsonrpc":"2.0","method":"session/update","params":%s}`,
			`{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"hi"}}}`},
	}
}

// TestHostileLines: every hostile variant of a valid message, from either
// side, is refused in JSON-RPC form (-32700) and goes no further: no
// request reaches the editor nor a decision the kernel, no answer reaches
// the other side, and an unreadable answer of the editor fails its call.
func TestHostileLines(t *testing.T) {
	f := start(t, nil, grant("*"), grant(MethodPermission))
	a := filepath.Join(f.root, "a.txt")
	r := f.raw(t)
	refused := func(what string, m map[string]any, ids ...any) {
		t.Helper()
		if errCode(m) != -32700 {
			t.Fatalf("%s: answered %v, want -32700", what, m)
		}
		for _, id := range ids {
			if m["id"] == id {
				return
			}
		}
		t.Fatalf("%s: answered under id %v, want one of %v", what, m["id"], ids)
	}
	reads := 0
	// goodRead: a read reaches the editor as the next line it sees, so
	// nothing before it did; its answer reaches the agent.
	goodRead := func(what string) {
		t.Helper()
		reads++
		id := 1000 + reads
		r.agent(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`)
		line, m := r.next(r.toEditor)
		if m["method"] != MethodRead || !strings.Contains(line, `"path":"`+a+`"`) {
			t.Fatalf("%s: the editor was sent %s", what, line)
		}
		r.editor(`{"jsonrpc":"2.0","id":"` + m["id"].(string) + `","result":{"content":"alpha"}}`)
		if line, m := r.next(r.toAgent); m["id"] != float64(id) || !strings.Contains(line, `"content":"alpha"`) {
			t.Fatalf("%s: the agent got %s", what, line)
		}
	}
	// The agent's requests and notifications.
	for _, b := range agentRequests(a) {
		for _, v := range hostilejson.Variants([]byte(b.object)) {
			what := b.name + "/" + v.Name
			r.agent(string(b.fill(v.Doc)))
			_, m := r.next(r.toAgent)
			refused(what, m, float64(5), nil)
			goodRead(what)
		}
	}
	// The editor's requests: initialize, its capabilities, and another.
	editorRequests := []varied{
		{"initialize params", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":%s}`, `{"protocolVersion":1,"clientCapabilities":{"fs":{"readTextFile":true}}}`},
		{"initialize clientCapabilities", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1,"clientCapabilities":%s}}`, `{"fs":{"readTextFile":true},"terminal":true}`},
		{"session/new envelope", "%s", `{"jsonrpc":"2.0","id":0,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}`},
	}
	next := 0
	// goodEditorRequest: an editor request reaches the agent as the next
	// line it sees; the agent's answer reaches the editor.
	goodEditorRequest := func(what string) string {
		t.Helper()
		next++
		id := strconv.Itoa(2000 + next)
		r.editor(`{"jsonrpc":"2.0","id":` + id + `,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}`)
		if line, m := r.next(r.toAgent); m["method"] != "session/new" || m["id"] != float64(2000+next) {
			t.Fatalf("%s: the agent was sent %s", what, line)
		}
		return id
	}
	for _, b := range editorRequests {
		for _, v := range hostilejson.Variants([]byte(b.object)) {
			what := b.name + "/" + v.Name
			r.editor(string(b.fill(v.Doc)))
			_, m := r.next(r.toEditor)
			refused(what, m, float64(0), nil)
			id := goodEditorRequest(what)
			r.agent(`{"jsonrpc":"2.0","id":` + id + `,"result":{"sessionId":"s"}}`)
			if line, m := r.next(r.toEditor); m["id"] != float64(2000+next) || !strings.Contains(line, `"sessionId":"s"`) {
				t.Fatalf("%s: the editor got %s", what, line)
			}
		}
	}
	// The agent's answer to an editor request: the editor is told, under
	// its id, and the agent's other lines still pass.
	for _, v := range hostilejson.Variants([]byte(`{"sessionId":"s"}`)) {
		what := "the agent's answer/" + v.Name
		id := goodEditorRequest(what)
		r.agent(`{"jsonrpc":"2.0","id":` + id + `,"result":` + string(v.Doc) + `}`)
		_, m := r.next(r.toEditor)
		refused(what, m, float64(2000+next))
	}
	// The editor's answer to a forwarded read: the call fails, the agent
	// is told under its id, and the outcome is recorded as failed.
	failed := 0
	for _, v := range hostilejson.Variants([]byte(`{"content":"alpha"}`)) {
		what := "the editor's answer/" + v.Name
		reads++
		failed++
		id := 1000 + reads
		r.agent(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`)
		_, fwd := r.next(r.toEditor)
		r.editor(`{"jsonrpc":"2.0","id":"` + fwd["id"].(string) + `","result":` + string(v.Doc) + `}`)
		_, m := r.next(r.toAgent)
		refused(what, m, float64(id))
		goodRead(what)
	}

	ds := natstest.Decisions(t, f.js)
	if len(ds) != reads {
		t.Fatalf("%d decisions for %d reads: a refused line reached the kernel", len(ds), reads)
	}
	for _, d := range ds {
		var p map[string]any
		if err := json.Unmarshal(d.Parameters, &p); err != nil || d.ToolName != MethodRead || p["path"] != a {
			t.Fatalf("decision %s %s", d.ToolName, d.Parameters)
		}
	}
	n := 0
	for _, o := range natstest.Outcomes(t, f.js) {
		if o.Outcome == schemas.OutcomeFailed {
			n++
		}
	}
	if n != failed {
		t.Fatalf("%d failed outcomes, want %d (the unreadable answers)", n, failed)
	}
}

// FuzzLine: no line panics the proxy's reader, and a line it accepts is
// one strictjson accepts; the params a governed request sends the editor
// are too.
func FuzzLine(f *testing.F) {
	for _, b := range agentRequests("/a") {
		f.Add(b.valid())
		for _, v := range hostilejson.Variants([]byte(b.object)) {
			f.Add(b.fill(v.Doc))
		}
	}
	f.Add([]byte(`{"jsonrpc":"2.0","id":"chio-1","result":{"content":"x","_meta":{"k":1}}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		leading(line)
		m, err := parse(line)
		if err != nil {
			return
		}
		if err := strictjson.Valid(line); err != nil {
			t.Fatalf("parse accepted a line strictjson refuses: %v", err)
		}
		if !m.isRequest() || !governed[m.Method] {
			return
		}
		s := &session{terminals: map[string]string{}}
		c, err := s.arguments(m.Method, m.Params)
		if err != nil {
			return
		}
		if c.params != nil {
			if err := strictjson.Valid(c.params); err != nil {
				t.Fatalf("the editor would be sent params strictjson refuses: %v", err)
			}
		}
		args, err := json.Marshal(c.args)
		if err != nil {
			t.Fatalf("arguments do not encode: %v", err)
		}
		if err := strictjson.Valid(args); err != nil {
			t.Fatalf("arguments strictjson refuses: %v", err)
		}
	})
}
