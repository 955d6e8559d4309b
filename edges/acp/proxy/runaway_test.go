package proxy

import (
	"bufio"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natstest"
)

const permissionLine = `{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"c"},"options":[{"optionId":"ok","name":"OK","kind":"allow_once"},{"optionId":"no","name":"No","kind":"reject_once"}]}}`

// TestApprovalDeadline: a permission request the person answers carries
// an outcome_deadline of the approval wait and a minute after its
// decision, so the ledger's incomplete-after does not end it while the
// person may still answer; one the policy answers, and a file read, carry
// none. A person who does not answer within the wait is cut off: the
// editor is told to cancel and the agent gets an error; whether the
// editor acted on it is unknown, so no outcome is written and the ledger
// ends the call incomplete at its deadline.
func TestApprovalDeadline(t *testing.T) {
	e := newEnv(t, nil)
	const wait = 400 * time.Millisecond
	p, err := e.proxy(e.token(t, grant("*")), WithLogger(quiet), WithApprovalWait(wait))
	if err != nil {
		t.Fatal(err)
	}
	f := e.fixture(t, p)
	r := f.raw(t)
	a := filepath.Join(f.root, "a.txt")
	r.agent(`{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"sessionId":"s","path":"` + a + `"}}`)
	_, fwd := r.next(r.toEditor)
	r.editor(`{"jsonrpc":"2.0","id":` + string(mustJSON(fwd["id"])) + `,"result":{"content":"alpha"}}`)
	if _, m := r.next(r.toAgent); m["result"] == nil {
		t.Fatalf("read: %v", m)
	}

	r.agent(permissionLine)
	_, asked := r.next(r.toEditor)
	if asked["method"] != MethodPermission {
		t.Fatalf("the editor was sent %v", asked)
	}
	// Nobody answers: after the wait the editor is told to cancel and
	// the agent gets an error.
	_, cancel := r.next(r.toEditor)
	if cancel["method"] != methodCancelRequest {
		t.Fatalf("after the wait the editor was sent %v, want %s", cancel, methodCancelRequest)
	}
	_, ans := r.next(r.toAgent)
	if ans["error"] == nil {
		t.Fatalf("unanswered permission: %v", ans)
	}

	ds := byTool(t, f.js)
	read, perm := ds[MethodRead], ds[MethodPermission]
	if len(read) != 1 || read[0].OutcomeDeadline != 0 {
		t.Fatalf("read decision: %+v", read)
	}
	want := uint64((wait + approvalMargin + time.Second - 1) / time.Second)
	if len(perm) != 1 || perm[0].OutcomeDeadline != perm[0].Timestamp+want {
		t.Fatalf("permission decision: deadline %d, timestamp %d, want +%d", perm[0].OutcomeDeadline, perm[0].Timestamp, want)
	}
	if o, ok := natstest.Outcomes(t, f.js)[perm[0].ReceiptID]; ok {
		t.Fatalf("the unanswered permission request has an outcome: %+v", o)
	}

	t.Run("policy answers", func(t *testing.T) {
		f := start(t, nil, grant("*"), grant(MethodPermission))
		r := f.raw(t)
		r.agent(permissionLine)
		if _, m := r.next(r.toAgent); m["result"] == nil {
			t.Fatalf("policy permission: %v", m)
		}
		if d := byTool(t, f.js)[MethodPermission]; len(d) != 1 || d[0].OutcomeDeadline != 0 {
			t.Fatalf("policy permission decision: %+v", d)
		}
	})
}

// TestStuckEditorShutdown: an editor that stops reading (a real pipe
// nobody reads, filled by a large session/update) while a governed call
// waits on it does not hold the session: once its context ends, Serve
// returns within the write timeout. Without it the relay of the update
// holds the editor's writer forever, and the call's cancel to the
// editor waits behind it, and Serve for the call.
func TestStuckEditorShutdown(t *testing.T) {
	e := newEnv(t, nil)
	const timeout = time.Second
	p, err := e.proxy(e.token(t, grant("*")), WithLogger(quiet), WithWriteTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	f := e.fixture(t, p)
	edR, edW := io.Pipe()      // editor → proxy: open, silent
	peR, peW, err := os.Pipe() // proxy → editor: nobody reads past the first line
	if err != nil {
		t.Fatal(err)
	}
	paR, paW := io.Pipe() // proxy → agent
	apR, apW := io.Pipe() // agent → proxy
	t.Cleanup(func() { edW.Close(); peR.Close(); peW.Close(); paR.Close(); apW.Close() })
	toAgent := bufio.NewScanner(paR)
	go func() {
		for toAgent.Scan() {
		}
	}()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- p.Serve(ctx, edR, peW, paW, apR) }()

	a := filepath.Join(f.root, "a.txt")
	if _, err := io.WriteString(apW, `{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"sessionId":"s","path":"`+a+`"}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	// The read reaches the editor (the pipe has room for it), which never
	// answers; then a session/update far larger than the pipe holds.
	line, err := bufio.NewReader(peR).ReadString('\n')
	if err != nil || !strings.Contains(line, MethodRead) {
		t.Fatalf("the editor got %q, %v", line, err)
	}
	big := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` +
		strings.Repeat("x", 1<<20) + `"}}}}` + "\n"
	go io.WriteString(apW, big) //nolint:errcheck // the proxy may stop reading it
	time.Sleep(timeout / 4)     // let the relay of big fill the pipe and block; not a measurement
	start := time.Now()
	stop()
	select {
	case err := <-served:
		if err == nil {
			t.Fatal("Serve returned nil after its context ended")
		}
		t.Logf("Serve returned %v %s after the context ended, nobody reading", err, time.Since(start))
	case <-time.After(timeout + 20*time.Second): // a bound, not a measurement: without write deadlines it never returns
		t.Fatal("Serve is blocked on an editor that does not read")
	}
	if ds := byTool(t, f.js)[MethodRead]; len(ds) != 1 || ds[0].Decision.Verdict != "allow" {
		t.Fatalf("read decisions: %+v", ds)
	}
}

// TestStuckEditorEndsSession: an editor that stops reading is treated as
// gone once a write to it times out: the governed call waiting on it is
// cut, the agent's input is closed (it sees the editor leave), and when
// the agent exits Serve returns, all without the caller ending anything.
func TestStuckEditorEndsSession(t *testing.T) {
	e := newEnv(t, nil)
	const timeout = 300 * time.Millisecond
	p, err := e.proxy(e.token(t, grant("*")), WithLogger(quiet), WithWriteTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	f := e.fixture(t, p)
	edR, edW := io.Pipe()
	peR, peW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	paR, paW := io.Pipe()
	apR, apW := io.Pipe()
	t.Cleanup(func() { edW.Close(); peR.Close(); peW.Close(); paR.Close(); apW.Close() })
	agentEOF := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(paR)
		for sc.Scan() {
		}
		close(agentEOF)
	}()
	served := make(chan error, 1)
	go func() { served <- p.Serve(context.Background(), edR, peW, paW, apR) }()
	a := filepath.Join(f.root, "a.txt")
	if _, err := io.WriteString(apW, `{"jsonrpc":"2.0","id":1,"method":"fs/read_text_file","params":{"sessionId":"s","path":"`+a+`"}}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(peR).ReadString('\n'); err != nil || !strings.Contains(line, MethodRead) {
		t.Fatalf("the editor got %q, %v", line, err)
	}
	big := `{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"` +
		strings.Repeat("x", 1<<20) + `"}}}}` + "\n"
	go io.WriteString(apW, big) //nolint:errcheck // the proxy stops reading it
	select {
	case <-agentEOF:
	case <-time.After(timeout + 20*time.Second): // a bound, not a measurement
		t.Fatal("the agent's input was not closed after the editor stopped reading")
	}
	apW.Close() // the agent exits when its input ends
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v, want nil (the editor left, then the agent)", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after the agent exited")
	}
}
