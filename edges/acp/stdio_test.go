package acp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// lineClient speaks newline-delimited JSON-RPC to ServeStdio.
type lineClient struct {
	w    io.WriteCloser
	r    *bufio.Scanner
	next int
	done chan error
}

func serveStdio(t *testing.T, f *fixture, tok string) *lineClient {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &lineClient{w: inW, r: bufio.NewScanner(outR), done: make(chan error, 1)}
	c.r.Buffer(nil, MaxLineBytes)
	go func() {
		err := f.edge.ServeStdio(context.Background(), tok, inR, outW)
		outW.Close()
		c.done <- err
	}()
	t.Cleanup(func() { inW.Close() })
	return c
}

// call sends one request and reads its answer (one request at a time).
func (c *lineClient) call(t *testing.T, method string, params any) answer {
	t.Helper()
	c.next++
	line, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": c.next, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.w.Write(append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	if !c.r.Scan() {
		t.Fatalf("no answer: %v", c.r.Err())
	}
	var a answer
	if err := json.Unmarshal(c.r.Bytes(), &a); err != nil {
		t.Fatalf("answer %s: %v", c.r.Bytes(), err)
	}
	if string(a.ID) != strings.TrimSpace(string(mustJSON(t, c.next))) {
		t.Fatalf("answer id %s, want %d", a.ID, c.next)
	}
	return a
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestStdioEndToEnd(t *testing.T) {
	f := start(t)
	c := serveStdio(t, f, wildcard(t))

	var init struct {
		ProtocolVersion int `json:"protocolVersion"`
	}
	ok(t, c.call(t, MethodInitialize, map[string]any{"protocolVersion": 1}), &init)
	if init.ProtocolVersion != 1 {
		t.Fatalf("initialize: %+v", init)
	}
	var list struct{ Capabilities []Capability }
	ok(t, c.call(t, ExtensionPrefix+MethodListCapabilities, nil), &list)
	if len(list.Capabilities) != 5 {
		t.Fatalf("listed %+v", list.Capabilities)
	}
	var perm struct{ Decision string }
	ok(t, c.call(t, MethodRequestPermission, map[string]any{"capabilityId": "exec_command"}), &perm)
	if perm.Decision != DecisionDeny {
		t.Fatalf("permission under a wildcard grant: %s", perm.Decision)
	}
	var inv struct {
		ReceiptID string `json:"receiptId"`
	}
	// The deny is enforced, not advisory: the invoke is refused too.
	if code := c.call(t, MethodInvoke, map[string]any{"capabilityId": "exec_command", "arguments": map[string]any{"path": "ls"}}).code(); code != CodeDenied {
		t.Fatalf("invoke after a permission deny: %d", code)
	}
	ok(t, c.call(t, MethodInvoke, map[string]any{"capabilityId": "read_file", "arguments": map[string]any{"path": "/tmp/x"}}), &inv)
	if inv.ReceiptID == "" {
		t.Fatal("no receipt id")
	}
	var task taskResult
	ok(t, c.call(t, MethodStream, map[string]any{"capabilityId": "read_file"}), &task)
	ok(t, c.call(t, MethodResume, map[string]any{"taskId": task.Task.ID}), &task)
	if task.Task.State != TaskCompleted {
		t.Fatalf("resume: %+v", task.Task)
	}
	ok(t, c.call(t, MethodStream, map[string]any{"capabilityId": "read_file"}), &task)
	ok(t, c.call(t, MethodCancel, map[string]any{"taskId": task.Task.ID}), &task)
	if task.Task.State != TaskCanceled {
		t.Fatalf("cancel: %+v", task.Task)
	}
	if a := c.call(t, "session/prompt", nil); a.code() != CodeMethodNotFound {
		t.Fatalf("unknown method: code %d", a.code())
	}
	c.w.Close()
	select {
	case err := <-c.done:
		if err != nil {
			t.Fatalf("ServeStdio: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeStdio did not return at the end of its input")
	}
}

// A client that writes its requests and closes its end still gets every
// answer; notifications get none; bad lines get JSON-RPC errors.
func TestStdioAnswersEverythingReadBeforeEOF(t *testing.T) {
	f := start(t)
	var in strings.Builder
	const n = 20
	for i := range n {
		in.WriteString(string(mustJSON(t, map[string]any{"jsonrpc": "2.0", "id": i, "method": MethodInvoke,
			"params": map[string]any{"capabilityId": "read_file"}})) + "\n")
	}
	in.WriteString(`{"jsonrpc":"2.0","method":"tool/invoke","params":{"capabilityId":"search"}}` + "\n") // a notification
	in.WriteString("\n")
	in.WriteString(`{not json` + "\n")
	in.WriteString(`[{"jsonrpc":"2.0","id":"b1","method":"initialize"},{"jsonrpc":"2.0","id":"b2","method":"nope"}]` + "\n")
	var out bytes.Buffer
	if err := f.edge.ServeStdio(context.Background(), wildcard(t), strings.NewReader(in.String()), &out); err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line := sc.Bytes()
		var batch []answer
		if json.Unmarshal(line, &batch) != nil {
			var a answer
			if err := json.Unmarshal(line, &a); err != nil {
				t.Fatalf("answer %s: %v", line, err)
			}
			batch = []answer{a}
		}
		for _, a := range batch {
			codes[string(a.ID)] = a.code()
		}
	}
	if len(codes) != n+3 { // n invokes, the parse error (id null), two in the batch
		t.Fatalf("%d answers: %v", len(codes), codes)
	}
	if codes["null"] != CodeParseError || codes[`"b1"`] != 0 || codes[`"b2"`] != CodeMethodNotFound || codes["0"] != 0 {
		t.Fatalf("codes %v", codes)
	}
}

func TestStdioRefusesWithoutCapability(t *testing.T) {
	f := start(t)
	cases := []struct{ name, tok string }{
		{"none", ""},
		{"untrusted", tokenBy(t, otherKey, "cap-x", agentKey, grant("*"))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := f.edge.ServeStdio(context.Background(), c.tok, strings.NewReader(""), io.Discard); err == nil {
				t.Fatal("served without a valid capability")
			}
		})
	}
	// The dev capability stands in for none.
	g := start(t, WithDevToken(wildcard(t)))
	if err := g.edge.ServeStdio(context.Background(), "", strings.NewReader(""), io.Discard); err != nil {
		t.Fatalf("dev capability: %v", err)
	}
}
