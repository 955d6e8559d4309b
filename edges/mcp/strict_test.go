package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The valid documents whose hostile variants every transport refuses.
const (
	readArgsDoc = `{"path":"/tmp/x"}`
	readParams  = `{"name":"read","arguments":` + readArgsDoc + `}`
	readCall    = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + readParams + `}`
)

// strictCase is a body the edge must refuse before the SDK reads it, with
// the JSON-RPC code and id of its answer.
type strictCase struct {
	name string
	body string
	code int64
	id   string // the answer's id, raw
}

// strictCases are the hostile variants of a tools/call request, of its
// params and of its arguments, the two readings of a repeated tool name,
// and the ids the SDK would answer and record as other numbers.
func strictCases(t testing.TB) []strictCase {
	t.Helper()
	var out []strictCase
	envelopeCode := func(err error) (int64, string) {
		switch err {
		case strictjson.ErrDuplicateMember, strictjson.ErrDepth:
			return codeInvalidRequest, "1"
		case strictjson.ErrSyntax: // data after the value: no request to answer
			return codeParseError, "null"
		}
		return codeParseError, "1"
	}
	for _, v := range hostilejson.Variants([]byte(readCall)) {
		code, id := envelopeCode(v.Err)
		out = append(out, strictCase{"envelope: " + v.Name, string(v.Doc), code, id})
	}
	inParams := func(params []byte) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":` + string(params) + `}`
	}
	for _, v := range hostilejson.Variants([]byte(readParams)) {
		if v.Err == strictjson.ErrSyntax {
			continue // data after params is data after a member: invalid syntax, not params
		}
		out = append(out, strictCase{"params: " + v.Name, inParams(v.Doc), codeInvalidParams, "1"})
	}
	for _, v := range hostilejson.Variants([]byte(readArgsDoc)) {
		if v.Err == strictjson.ErrSyntax {
			continue
		}
		out = append(out, strictCase{"arguments: " + v.Name, callBody(1, "read", string(v.Doc)), codeInvalidParams, "1"})
	}
	return append(out,
		strictCase{"tool named twice", inParams([]byte(`{"Name":"read","name":"explode","arguments":{}}`)), codeInvalidParams, "1"},
		strictCase{"id twice", `{"jsonrpc":"2.0","id":1,"ID":2,"method":"tools/call","params":` + readParams + `}`, codeInvalidRequest, "null"},
		strictCase{"id past 2^53", callBody(json.Number("9007199254740993"), "read", readArgsDoc), codeInvalidRequest, "9007199254740993"},
		strictCase{"negative id past 2^53", callBody(json.Number("-9007199254740992"), "read", readArgsDoc), codeInvalidRequest, "-9007199254740992"},
		strictCase{"fractional id", callBody(json.Number("1.5"), "read", readArgsDoc), codeInvalidRequest, "1.5"},
		strictCase{"exponent id", callBody(json.Number("1e3"), "read", readArgsDoc), codeInvalidRequest, "1e3"},
		strictCase{"negative zero id", callBody(json.Number("-0"), "read", readArgsDoc), codeInvalidRequest, "-0"},
	)
}

// Over HTTP each is a 400 in JSON-RPC's form answering the request's id
// when it is unambiguous, and writes no event; the edge keeps serving.
func TestStrictRequestsHTTP(t *testing.T) {
	f := start(t)
	tok := fullToken(t)
	for _, c := range strictCases(t) {
		status, _, a := post(t, f.url, tok, c.body, nil)
		if status != http.StatusBadRequest || a.Error == nil || a.Error.Code != c.code || string(a.ID) != c.id ||
			!strings.HasPrefix(a.Error.Message, "chio: ") {
			t.Errorf("%s: %d id %s %+v", c.name, status, a.ID, a.Error)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after refused requests", n)
	}
	// The largest id the SDK keeps exact is answered and recorded exactly.
	status, _, a := post(t, f.url, tok, callBody(json.Number("9007199254740991"), "read", readArgsDoc), nil)
	if status != http.StatusOK || a.Error != nil || string(a.ID) != "9007199254740991" {
		t.Fatalf("exact id: %d id %s %+v", status, a.ID, a.Error)
	}
	recordedIDs(t, f, `"request_id":9007199254740991`)
}

// recordedIDs checks that the one decision event records want verbatim.
func recordedIDs(t testing.TB, f *fixture, want string) {
	t.Helper()
	evs := natstest.Decisions(t, f.js)
	if len(evs) != 1 {
		t.Fatalf("%d decision events", len(evs))
	}
	for _, ev := range evs {
		if !bytes.Contains(ev.Metadata, []byte(want)) {
			t.Fatalf("metadata %s, want %s", ev.Metadata, want)
		}
	}
}

// A batch is refused whole: past MaxBatchMessages, or with one hostile
// message or id in it, before any of its calls runs.
func TestStrictBatchesHTTP(t *testing.T) {
	f := start(t)
	h := map[string]string{"Mcp-Protocol-Version": "2025-03-26"} // batches end with 2025-06-18
	var calls []string
	for i := range MaxBatchMessages + 1 {
		calls = append(calls, callBody(i, "read", readArgsDoc))
	}
	cases := []struct {
		name, body string
		code       int64
	}{
		{"too many", "[" + strings.Join(calls, ",") + "]", codeInvalidRequest},
		{"a hostile member", "[" + calls[0] + `,{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"read","name":"explode"}}]`, codeInvalidRequest},
		{"an id past 2^53", "[" + calls[0] + "," + callBody(json.Number("9007199254740993"), "read", readArgsDoc) + "]", codeInvalidRequest},
		{"invalid UTF-8", "[" + calls[0] + ",\"\xff\"]", codeParseError},
	}
	for _, c := range cases {
		status, _, a := post(t, f.url, fullToken(t), c.body, h)
		if status != http.StatusBadRequest || a.Error == nil || a.Error.Code != c.code || string(a.ID) != "null" {
			t.Errorf("%s: %d id %s %+v", c.name, status, a.ID, a.Error)
		}
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after refused batches", n)
	}
	// At the bound, every call runs.
	req, err := http.NewRequest(http.MethodPost, f.url+Path, strings.NewReader("["+strings.Join(calls[:MaxBatchMessages], ",")+"]"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+fullToken(t))
	req.Header.Set("Mcp-Protocol-Version", "2025-03-26")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var answers []rpcAnswer
	err = json.NewDecoder(resp.Body).Decode(&answers)
	resp.Body.Close()
	if n := len(natstest.Decisions(t, f.js)); err != nil || resp.StatusCode != http.StatusOK || len(answers) != MaxBatchMessages || n != MaxBatchMessages {
		t.Fatalf("batch at the bound: %d %v, %d answers, %d decision events", resp.StatusCode, err, len(answers), n)
	}
}

// Over stdio each refused line gets its JSON-RPC error line and never
// reaches the SDK; the session goes on, and answers and records the
// largest exact id as sent.
func TestStrictRequestsStdio(t *testing.T) {
	f := start(t)
	toServer, clientOut := io.Pipe()
	clientIn, fromServer := io.Pipe()
	served := make(chan error, 1)
	go func() {
		served <- f.edge.ServeStdio(context.Background(), fullToken(t), toServer, fromServer)
	}()
	lines := bufio.NewReader(clientIn)
	send := func(line string) rpcAnswer {
		t.Helper()
		// Written aside: a line refused part way is answered before the
		// rest of it is read, as a pipe's buffer would allow.
		wrote := make(chan error, 1)
		go func() { _, err := io.WriteString(clientOut, line+"\n"); wrote <- err }()
		raw, err := lines.ReadBytes('\n')
		if werr := <-wrote; werr != nil {
			t.Fatal(werr)
		}
		if err != nil {
			t.Fatal(err)
		}
		var a rpcAnswer
		if err := json.Unmarshal(raw, &a); err != nil {
			t.Fatalf("answer %s: %v", raw, err)
		}
		return a
	}
	if a := send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},` +
		`"clientInfo":{"name":"raw","version":"1"}}}`); a.Error != nil {
		t.Fatalf("initialize: %+v", a.Error)
	}
	if _, err := io.WriteString(clientOut, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"); err != nil {
		t.Fatal(err)
	}
	for _, c := range strictCases(t) {
		if strings.ContainsAny(c.body, "\n") {
			t.Fatalf("%s: a line break in the body", c.name)
		}
		if a := send(c.body); a.Error == nil || a.Error.Code != c.code || string(a.ID) != c.id {
			t.Errorf("%s: id %s %+v", c.name, a.ID, a.Error)
		}
	}
	if a := send(`{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{"name":"read","arguments":{"path":"` +
		strings.Repeat("y", maxStampedLine) + `"}}}`); a.Error == nil || a.Error.Code != codeInvalidRequest || string(a.ID) != "null" {
		t.Errorf("a line over the bound: id %s %+v", a.ID, a.Error)
	}
	if n := len(natstest.Decisions(t, f.js)); n != 0 {
		t.Fatalf("%d decision events after refused lines", n)
	}
	if a := send(callBody(json.Number("9007199254740991"), "read", readArgsDoc)); a.Error != nil || string(a.ID) != "9007199254740991" {
		t.Fatalf("exact id: id %s %+v", a.ID, a.Error)
	}
	recordedIDs(t, f, `"request_id":9007199254740991`)
	clientOut.Close()
	if err := <-served; err != nil {
		t.Fatalf("ServeStdio: %v", err)
	}
}

// FuzzMCPMessage: reading a body or line never panics, and whatever
// reaches the SDK, stamped or not, is a document strictjson accepts.
func FuzzMCPMessage(f *testing.F) {
	seeds := []string{readCall, `[` + readCall + `,{"jsonrpc":"2.0","method":"notifications/initialized"}]`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"x","_meta":{"chio/jsonrpc_id":"forged"}}}`,
		callBody(json.Number("9007199254740993"), "read", readArgsDoc), `[]`, `[null]`, `42`, ``}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	for _, doc := range []string{readCall, readParams, readArgsDoc} {
		for _, v := range hostilejson.Variants([]byte(doc)) {
			if len(v.Doc) < 4096 {
				f.Add(v.Doc)
			}
		}
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		in := readMessages(body)
		if in.refusal != nil {
			if in.msgs != nil {
				t.Fatal("a refused body keeps its messages")
			}
			if strictjson.Valid(in.id) != nil {
				t.Fatalf("answer id %q", in.id)
			}
			return
		}
		if err := strictjson.Valid(body); err != nil {
			t.Fatalf("accepted what strictjson refuses: %v", err)
		}
		if len(in.msgs) == 0 || len(in.msgs) > MaxBatchMessages {
			t.Fatalf("%d messages accepted", len(in.msgs))
		}
		if out := stampMessages(in, body); strictjson.Valid(out) != nil {
			t.Fatalf("stamped %q", out)
		}
		for _, m := range in.msgs {
			if id, ok := m["id"]; ok && checkID(id) != "" {
				t.Fatalf("id %s accepted", id)
			}
			m.toolCall()
		}
	})
}
