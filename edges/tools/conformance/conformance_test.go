package conformance_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/conformance"
)

// ---- decoding the chunks strictly ----

// The ProtoJSON shapes the tool may emit; decoding refuses unknown members,
// so an emitted taskId or contextId (the edge's job) fails the test.
type agentMessage struct {
	MessageID string            `json:"messageId"`
	Role      string            `json:"role"`
	Parts     []json.RawMessage `json:"parts"`
}

type statusUpdate struct {
	Status struct {
		State   string        `json:"state"`
		Message *agentMessage `json:"message"`
	} `json:"status"`
}

type artifactUpdate struct {
	Artifact struct {
		ArtifactID string            `json:"artifactId"`
		Name       string            `json:"name"`
		Parts      []json.RawMessage `json:"parts"`
	} `json:"artifact"`
	Append    bool `json:"append"`
	LastChunk bool `json:"lastChunk"`
}

// event is one decoded chunk: exactly one of the pointers is set.
type event struct {
	last     bool
	message  *agentMessage
	status   *statusUpdate
	artifact *artifactUpdate
}

func strict(raw json.RawMessage, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data")
	}
	return nil
}

func decode(t *testing.T, c tools.Chunk) event {
	t.Helper()
	var top map[string]json.RawMessage
	if err := json.Unmarshal(c.Data, &top); err != nil {
		t.Fatalf("chunk %s is not a JSON object: %v", c.Data, err)
	}
	if len(top) != 1 {
		t.Fatalf("chunk %s has %d members, want exactly one", c.Data, len(top))
	}
	ev := event{last: c.Last}
	for k, v := range top {
		var err error
		switch k {
		case "message":
			ev.message = new(agentMessage)
			err = strict(v, ev.message)
		case "statusUpdate":
			ev.status = new(statusUpdate)
			err = strict(v, ev.status)
		case "artifactUpdate":
			ev.artifact = new(artifactUpdate)
			err = strict(v, ev.artifact)
		default:
			t.Fatalf("chunk %s: unexpected member %q", c.Data, k)
		}
		if err != nil {
			t.Fatalf("chunk %s: %s: %v", c.Data, k, err)
		}
	}
	return ev
}

// ---- expectations ----

// text matches an agent message's single text part.
type text struct {
	exact, contains string
}

func is(s string) *text  { return &text{exact: s} }
func has(s string) *text { return &text{contains: s} }

// want is one expected chunk.
type want struct {
	kind string // "message", "status" or "artifact"
	// status
	state string
	msg   *text // nil: the status carries no message
	// artifact
	parts     string // JSON array the artifact's parts must equal
	append    bool
	lastChunk bool
	sameID    bool // the artifactId of the previous artifact chunk
	// message
	reply *text
}

func status(state string, msg *text) want { return want{kind: "status", state: state, msg: msg} }
func reply(t *text) want                  { return want{kind: "message", reply: t} }
func art(parts string, appendTo, last, sameID bool) want {
	return want{kind: "artifact", parts: parts, append: appendTo, lastChunk: last, sameID: sameID}
}

const (
	working   = "TASK_STATE_WORKING"
	completed = "TASK_STATE_COMPLETED"
	inputReq  = "TASK_STATE_INPUT_REQUIRED"
	authReq   = "TASK_STATE_AUTH_REQUIRED"
	rejected  = "TASK_STATE_REJECTED"
)

// rawFile is the raw file artifact; its base64 content is checked apart.
const rawFile = `[{"raw":"*","filename":"output.txt","mediaType":"text/plain"}]`

func jsonEqual(t *testing.T, got []json.RawMessage, want string) bool {
	t.Helper()
	var g, w any
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %s: %v", want, err)
	}
	// "*" in an expected raw part stands for any non-empty base64.
	if gs, ok := g.([]any); ok {
		if ws, ok := w.([]any); ok && len(gs) == len(ws) {
			for i := range ws {
				wp, _ := ws[i].(map[string]any)
				gp, _ := gs[i].(map[string]any)
				if wp["raw"] == "*" && gp != nil {
					raw, _ := gp["raw"].(string)
					if dec, err := base64.StdEncoding.DecodeString(raw); err != nil || len(dec) == 0 {
						t.Errorf("raw part %q is not non-empty base64", raw)
					}
					gp["raw"] = "*"
				}
			}
		}
	}
	return reflect.DeepEqual(g, w)
}

// ids collects the agent message ids of every run, to check they are unique.
var ids = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

func checkAgentMessage(t *testing.T, where string, m *agentMessage, want *text) {
	t.Helper()
	if m.Role != "ROLE_AGENT" {
		t.Errorf("%s: role %q, want ROLE_AGENT", where, m.Role)
	}
	if id, err := uuid.Parse(m.MessageID); err != nil || id.Version() != 7 {
		t.Errorf("%s: messageId %q is not a UUIDv7", where, m.MessageID)
	}
	ids.Lock()
	if ids.seen[m.MessageID] {
		t.Errorf("%s: messageId %q reused", where, m.MessageID)
	}
	ids.seen[m.MessageID] = true
	ids.Unlock()
	if len(m.Parts) != 1 {
		t.Fatalf("%s: %d parts, want 1", where, len(m.Parts))
	}
	var p struct {
		Text *string `json:"text"`
	}
	if err := strict(m.Parts[0], &p); err != nil || p.Text == nil {
		t.Fatalf("%s: part %s is not a text part (%v)", where, m.Parts[0], err)
	}
	switch {
	case want.exact != "" && *p.Text != want.exact:
		t.Errorf("%s: text %q, want %q", where, *p.Text, want.exact)
	case want.contains != "" && !strings.Contains(*p.Text, want.contains):
		t.Errorf("%s: text %q does not contain %q", where, *p.Text, want.contains)
	}
}

// check compares the chunks with the expected sequence.
func check(t *testing.T, chunks []tools.Chunk, wants []want) {
	t.Helper()
	if len(chunks) != len(wants) {
		for _, c := range chunks {
			t.Logf("chunk: %s (last %v)", c.Data, c.Last)
		}
		t.Fatalf("%d chunks, want %d", len(chunks), len(wants))
	}
	prevArtifact := ""
	for i, c := range chunks {
		ev := decode(t, c)
		w := wants[i]
		where := fmt.Sprintf("chunk %d %s", i, c.Data)
		if ev.last != (i == len(chunks)-1) {
			t.Errorf("%s: Last = %v", where, ev.last)
		}
		switch w.kind {
		case "message":
			if ev.message == nil {
				t.Fatalf("%s: want a message", where)
			}
			checkAgentMessage(t, where, ev.message, w.reply)
		case "status":
			if ev.status == nil {
				t.Fatalf("%s: want a statusUpdate", where)
			}
			if ev.status.Status.State != w.state {
				t.Errorf("%s: state %q, want %q", where, ev.status.Status.State, w.state)
			}
			switch m := ev.status.Status.Message; {
			case w.msg == nil && m != nil:
				t.Errorf("%s: unexpected status message", where)
			case w.msg != nil && m == nil:
				t.Errorf("%s: status has no message", where)
			case m != nil:
				checkAgentMessage(t, where, m, w.msg)
			}
		case "artifact":
			a := ev.artifact
			if a == nil {
				t.Fatalf("%s: want an artifactUpdate", where)
			}
			if a.Artifact.ArtifactID == "" {
				t.Errorf("%s: no artifactId", where)
			}
			if w.sameID && a.Artifact.ArtifactID != prevArtifact {
				t.Errorf("%s: artifactId %q, want the previous chunk's %q", where, a.Artifact.ArtifactID, prevArtifact)
			}
			prevArtifact = a.Artifact.ArtifactID
			if !jsonEqual(t, a.Artifact.Parts, w.parts) {
				t.Errorf("%s: parts, want %s", where, w.parts)
			}
			if a.Append != w.append || a.LastChunk != w.lastChunk {
				t.Errorf("%s: append %v lastChunk %v, want %v %v", where, a.Append, a.LastChunk, w.append, w.lastChunk)
			}
		}
	}
}

// ---- running the tool ----

func invocation(id, args string) tools.Invocation {
	return tools.Invocation{ID: id, ServerID: conformance.ServerID, ToolName: conformance.ToolName, Arguments: json.RawMessage(args)}
}

func userMessage(messageID string, parts string) string {
	return fmt.Sprintf(`{"message":{"messageId":%q,"contextId":"ctx-1","role":"ROLE_USER","parts":%s}}`, messageID, parts)
}

func collect(s *conformance.Server, ctx context.Context, inv tools.Invocation) ([]tools.Chunk, error) {
	var chunks []tools.Chunk
	err := s.InvokeStream(ctx, inv, func(c tools.Chunk) error {
		chunks = append(chunks, c)
		return nil
	})
	return chunks, err
}

func TestBehaviours(t *testing.T) {
	const hi = `[{"text":"hi"}]`
	textArt := func(s string) string { return fmt.Sprintf(`[{"text":%q}]`, s) }
	cases := []struct {
		messageID string
		parts     string
		want      []want
	}{
		{"tck-complete-task-0196", hi, []want{status(completed, is("Hello from TCK"))}},
		{"tck-artifact-text-1", hi, []want{art(textArt("Generated text content"), false, true, false), status(completed, nil)}},
		{"tck-artifact-file-1", hi, []want{art(rawFile, false, true, false), status(completed, nil)}},
		{"tck-artifact-file-url-1", hi, []want{
			art(`[{"url":"https://example.com/output.txt","filename":"output.txt","mediaType":"text/plain"}]`, false, true, false),
			status(completed, nil),
		}},
		{"tck-artifact-data-1", hi, []want{art(`[{"data":{"key":"value","count":42}}]`, false, true, false), status(completed, nil)}},
		{"tck-message-response-1", hi, []want{reply(is("Direct message response"))}},
		{"tck-input-required-1", hi, []want{status(working, nil), status(inputReq, has("nput"))}},
		{"tck-reject-task-1", hi, []want{status(rejected, has("rejected"))}},
		{"tck-auth-required-1", hi, []want{status(working, nil), status(authReq, has("uthoriz"))}},
		{"tck-long-running-1", hi, []want{status(working, nil), status(completed, has("Long-running"))}},
		{"tck-conversation-1", `[{"text":"turn one"}]`, []want{status(working, nil), status(inputReq, has("turn one"))}},
		{"test-message-id-0.3-kit", hi, []want{status(working, nil), status(inputReq, has("hi"))}},
		{"cancel-test-message-id-0.3-kit", hi, []want{status(working, nil), status(inputReq, has("hi"))}},
		{"tck-stream-001-x", hi, []want{status(working, nil), art(textArt("Stream hello from TCK"), false, true, false), status(completed, nil)}},
		{"tck-stream-002-x", hi, []want{status(completed, has(""))}},
		{"tck-stream-003-x", hi, []want{status(working, nil), art(textArt("Stream task lifecycle"), false, true, false), status(completed, nil)}},
		{"tck-stream-ordering-001-x", hi, []want{status(working, nil), art(textArt("Ordered output"), false, true, false), status(completed, nil)}},
		{"tck-stream-artifact-text-x", hi, []want{status(working, nil), art(textArt("Streamed text content"), false, true, false), status(completed, nil)}},
		{"tck-stream-artifact-file-x", hi, []want{status(working, nil), art(rawFile, false, true, false), status(completed, nil)}},
		{"tck-stream-artifact-chunked-x", hi, []want{
			status(working, nil),
			art(`[{"text":"chunk-1 "}]`, false, false, false),
			art(`[{"text":"chunk-2"}]`, true, true, true),
			status(completed, nil),
		}},
		// The exact prefixes, with nothing after them, match too.
		{"tck-complete-task", hi, []want{status(completed, is("Hello from TCK"))}},
		{"tck-artifact-file", hi, []want{art(rawFile, false, true, false), status(completed, nil)}},
		// Anything else echoes.
		{"tck-unknown-1", `[{"text":"hello there"}]`, []want{status(completed, is("hello there"))}},
		{"tck-stream-004", `[{"text":"a"},{"data":{"x":1}},{"text":"b"}]`, []want{status(completed, is("a\nb"))}},
		{"TCK-COMPLETE-TASK-1", `[{"text":"case matters"}]`, []want{status(completed, is("case matters"))}},
		{"tck-complete", `[{"text":"a shorter prefix is not a match"}]`, []want{status(completed, is("a shorter prefix is not a match"))}},
		{"m-data", `[{"data":{"b":[1, 2],"a":"<x>"}}]`, []want{status(completed, is(`{"b":[1,2],"a":"<x>"}`))}},
		{"m-file", `[{"url":"https://example.com/x","mediaType":"text/plain"}]`, []want{status(completed, has(""))}},
		{"m-unicode", `[{"text":"héllo \"q\" <b>"}]`, []want{status(completed, is(`héllo "q" <b>`))}},
	}
	s := conformance.New(conformance.WithResubscribeHold(0), conformance.WithLongRunningHold(0))
	for i, c := range cases {
		t.Run(c.messageID, func(t *testing.T) {
			chunks, err := collect(s, context.Background(), invocation(fmt.Sprintf("r-%d", i), userMessage(c.messageID, c.parts)))
			if err != nil {
				t.Fatalf("InvokeStream: %v", err)
			}
			check(t, chunks, c.want)
		})
	}
	if s.Len() != 0 {
		t.Errorf("%d invocations still tracked", s.Len())
	}
}

// A follow-up on a task goes on with the conversation unless its prefix
// selects a behaviour: tck-complete-task ends it.
func TestFollowUps(t *testing.T) {
	s := conformance.New()
	for _, c := range []struct {
		messageID string
		want      []want
	}{
		{"continuation-message-id-1", []want{status(working, nil), status(inputReq, has("next"))}},
		{"tck-complete-task-2", []want{status(completed, is("Hello from TCK"))}},
	} {
		args := fmt.Sprintf(`{"message":{"messageId":%q,"taskId":"task-1","role":"ROLE_USER","parts":[{"text":"next"}]}}`, c.messageID)
		chunks, err := collect(s, context.Background(), invocation("r-"+c.messageID, args))
		if err != nil {
			t.Fatalf("%s: %v", c.messageID, err)
		}
		check(t, chunks, c.want)
	}
}

// Every agent message and artifact gets a fresh id on every call.
func TestFreshIDs(t *testing.T) {
	s := conformance.New()
	artifactIDs := map[string]bool{}
	for i := range 3 {
		chunks, err := collect(s, context.Background(), invocation(fmt.Sprintf("r-%d", i), userMessage("tck-artifact-text-1", `[{"text":"x"}]`)))
		if err != nil || len(chunks) != 2 {
			t.Fatalf("InvokeStream = %d chunks, %v", len(chunks), err)
		}
		ev := decode(t, chunks[0])
		if artifactIDs[ev.artifact.Artifact.ArtifactID] {
			t.Errorf("artifactId %q reused", ev.artifact.Artifact.ArtifactID)
		}
		artifactIDs[ev.artifact.Artifact.ArtifactID] = true
	}
}

// The message fields the tool does not read are accepted, as are unknown
// ones (A2A asks receivers to ignore them).
func TestArgumentsLenient(t *testing.T) {
	s := conformance.New()
	for i, args := range []string{
		`{"message":{"messageId":"tck-complete-task-1","role":"ROLE_USER","parts":[{"text":"x"}]}}`,
		`{"message":{"messageId":"tck-complete-task-1","taskId":"t","contextId":"c","role":"ROLE_USER","parts":[{"text":"x","mediaType":"text/plain"}],"metadata":{"k":1},"extensions":["u"],"referenceTaskIds":["t0"],"future":true}}`,
		`{"message":{"messageId":"tck-complete-task-1","parts":[{"raw":"AA==","filename":"f"}]}}`,
		` { "message" : { "parts" : [ { "data" : null } ] , "messageId" : "tck-complete-task-1" } } `,
	} {
		chunks, err := collect(s, context.Background(), invocation(fmt.Sprintf("r-%d", i), args))
		if err != nil {
			t.Errorf("%s: %v", args, err)
			continue
		}
		check(t, chunks, []want{status(completed, is("Hello from TCK"))})
	}
}

func TestBadArguments(t *testing.T) {
	s := conformance.New()
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	good := userMessage("tck-complete-task-1", `[{"text":"x"}]`)
	cases := []struct {
		name string
		ctx  context.Context
		inv  tools.Invocation
		want error // nil: any error
	}{
		{"unknown tool", ctx, tools.Invocation{ID: "r", ServerID: conformance.ServerID, ToolName: "other", Arguments: json.RawMessage(good)}, tools.ErrUnknownTool},
		{"other server", ctx, tools.Invocation{ID: "r", ServerID: "hello-a2a-srv", ToolName: conformance.ToolName, Arguments: json.RawMessage(good)}, tools.ErrUnknownTool},
		{"no id", ctx, invocation("", good), tools.ErrNoInvocationID},
		{"context done", canceled, invocation("r", good), context.Canceled},
		{"no arguments", ctx, invocation("r", ``), nil},
		{"invalid JSON", ctx, invocation("r", `{"message":`), nil},
		{"null", ctx, invocation("r", `null`), nil},
		{"array", ctx, invocation("r", `[]`), nil},
		{"string", ctx, invocation("r", `"message"`), nil},
		{"trailing data", ctx, invocation("r", good+` {}`), nil},
		{"no message", ctx, invocation("r", `{}`), nil},
		{"unknown member", ctx, invocation("r", `{"message":{"messageId":"m","parts":[{"text":"x"}]},"extra":1}`), nil},
		{"message null", ctx, invocation("r", `{"message":null}`), nil},
		{"message a string", ctx, invocation("r", `{"message":"hi"}`), nil},
		{"message an array", ctx, invocation("r", `{"message":[]}`), nil},
		{"no messageId", ctx, invocation("r", `{"message":{"parts":[{"text":"x"}]}}`), nil},
		{"messageId null", ctx, invocation("r", `{"message":{"messageId":null,"parts":[{"text":"x"}]}}`), nil},
		{"messageId a number", ctx, invocation("r", `{"message":{"messageId":7,"parts":[{"text":"x"}]}}`), nil},
		{"messageId empty", ctx, invocation("r", `{"message":{"messageId":"","parts":[{"text":"x"}]}}`), nil},
		{"no parts", ctx, invocation("r", `{"message":{"messageId":"m"}}`), nil},
		{"parts null", ctx, invocation("r", `{"message":{"messageId":"m","parts":null}}`), nil},
		{"parts empty", ctx, invocation("r", `{"message":{"messageId":"m","parts":[]}}`), nil},
		{"parts an object", ctx, invocation("r", `{"message":{"messageId":"m","parts":{"text":"x"}}}`), nil},
		{"part not an object", ctx, invocation("r", `{"message":{"messageId":"m","parts":["x"]}}`), nil},
		{"part null", ctx, invocation("r", `{"message":{"messageId":"m","parts":[null]}}`), nil},
		{"text a number", ctx, invocation("r", `{"message":{"messageId":"m","parts":[{"text":1}]}}`), nil},
		{"text null", ctx, invocation("r", `{"message":{"messageId":"m","parts":[{"text":null}]}}`), nil},
		{"contextId a number", ctx, invocation("r", `{"message":{"messageId":"m","contextId":1,"parts":[{"text":"x"}]}}`), nil},
		{"taskId an object", ctx, invocation("r", `{"message":{"messageId":"m","taskId":{},"parts":[{"text":"x"}]}}`), nil},
		{"role a number", ctx, invocation("r", `{"message":{"messageId":"m","role":1,"parts":[{"text":"x"}]}}`), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := s.InvokeStream(c.ctx, c.inv, func(ch tools.Chunk) error {
				t.Errorf("emitted %s", ch.Data)
				return nil
			})
			if err == nil || (c.want != nil && !errors.Is(err, c.want)) {
				t.Errorf("InvokeStream = %v; want an error (%v)", err, c.want)
			}
		})
	}
	if err := s.InvokeStream(ctx, invocation("r", good), nil); err == nil {
		t.Error("InvokeStream accepted a nil emit")
	}
	if s.Len() != 0 {
		t.Errorf("%d invocations still tracked", s.Len())
	}
}

func TestInvokeIsStreamOnly(t *testing.T) {
	s := conformance.New()
	out, err := s.Invoke(context.Background(), invocation("r", userMessage("tck-complete-task-1", `[{"text":"x"}]`)))
	if out != nil || !errors.Is(err, conformance.ErrStreamOnly) || !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Invoke = %s, %v; want ErrStreamOnly", out, err)
	}
	out, err = s.Invoke(context.Background(), tools.Invocation{ID: "r", ToolName: "other"})
	if out != nil || !errors.Is(err, tools.ErrUnknownTool) {
		t.Errorf("Invoke(other) = %s, %v; want ErrUnknownTool", out, err)
	}
	if s.Len() != 0 {
		t.Errorf("%d invocations still tracked", s.Len())
	}
}

func TestEmitError(t *testing.T) {
	stop := errors.New("client went away")
	n := 0
	err := conformance.New().InvokeStream(context.Background(), invocation("r", userMessage("tck-stream-001-1", `[{"text":"x"}]`)), func(tools.Chunk) error {
		n++
		return stop
	})
	if !errors.Is(err, stop) || n != 1 {
		t.Errorf("InvokeStream = %v after %d chunks; want the emit error after 1", err, n)
	}
}

// ---- the long-running task ----

func TestResubscribeHoldZeroCompletes(t *testing.T) {
	chunks, err := collect(conformance.New(conformance.WithResubscribeHold(-time.Second)), context.Background(),
		invocation("r", userMessage("test-resubscribe-message-id-1", `[{"text":"x"}]`)))
	if err != nil {
		t.Fatalf("InvokeStream: %v", err)
	}
	check(t, chunks, []want{status(working, nil), status(completed, has(""))})
	if conformance.DefaultResubscribeHold != 4*time.Second {
		t.Errorf("DefaultResubscribeHold = %v, want 4s (the reference agents' hold)", conformance.DefaultResubscribeHold)
	}
}

// The hold is an hour, so the call can only return because it was stopped;
// the test waits on conditions, never on the clock.
func TestResubscribeStops(t *testing.T) {
	cases := []struct {
		name string
		stop func(t *testing.T, s *conformance.Server, cancel context.CancelFunc)
		want error
	}{
		{"Cancel", func(t *testing.T, s *conformance.Server, _ context.CancelFunc) {
			if err := s.Cancel(context.Background(), "r-hold"); err != nil {
				t.Errorf("Cancel: %v", err)
			}
		}, tools.ErrCanceled},
		{"context", func(_ *testing.T, _ *conformance.Server, cancel context.CancelFunc) { cancel() }, context.Canceled},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := conformance.New(conformance.WithResubscribeHold(time.Hour))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := make(chan struct{})
			result := make(chan error, 1)
			var chunks []tools.Chunk
			go func() {
				result <- s.InvokeStream(ctx, invocation("r-hold", userMessage("test-resubscribe-message-id-1", `[{"text":"x"}]`)), func(ch tools.Chunk) error {
					chunks = append(chunks, ch)
					if len(chunks) == 1 {
						close(first)
					}
					return nil
				})
			}()
			<-first
			if s.Len() != 1 {
				t.Errorf("Len = %d while holding, want 1", s.Len())
			}
			c.stop(t, s, cancel)
			if err := <-result; !errors.Is(err, c.want) {
				t.Errorf("InvokeStream = %v, want %v", err, c.want)
			}
			if len(chunks) != 1 {
				t.Fatalf("%d chunks, want only the working status", len(chunks))
			}
			if ev := decode(t, chunks[0]); ev.status == nil || ev.status.Status.State != working || ev.last {
				t.Errorf("first chunk = %s (last %v), want a working status, not last", chunks[0].Data, chunks[0].Last)
			}
			if s.Len() != 0 {
				t.Errorf("%d invocations still tracked", s.Len())
			}
			if err := s.Cancel(context.Background(), "r-hold"); !errors.Is(err, tools.ErrNotRunning) {
				t.Errorf("Cancel after the stream ended = %v, want ErrNotRunning", err)
			}
		})
	}
}

// ---- manifest ----

func TestManifest(t *testing.T) {
	s := conformance.New()
	if s.ServerID() != "a2a-conformance" || len(s.ToolNames()) != 1 || s.ToolNames()[0] != "conformance" {
		t.Errorf("ServerID %q ToolNames %q", s.ServerID(), s.ToolNames())
	}
	m := s.Manifest()
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if m.ServerID != s.ServerID() || len(m.Tools) != 1 {
		t.Fatalf("manifest = %+v", m)
	}
	tool := m.Tools[0]
	if tool.Name != conformance.ToolName || tool.Description == "" || tool.HasSideEffects {
		t.Errorf("tool = %+v", tool)
	}
	var schema, wantSchema any
	if err := json.Unmarshal(tool.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true,"x-chio-cancellation":true,"properties":{"message":{"type":"object"}},"required":["message"]}`), &wantSchema)
	if !reflect.DeepEqual(schema, wantSchema) {
		t.Errorf("input_schema = %s", tool.InputSchema)
	}
	if len(tool.Metadata) != 2 || string(tool.Metadata["a2a.expose"]) != "true" || string(tool.Metadata[tools.MetaA2ANative]) != "true" {
		t.Errorf("metadata = %s", tool.Metadata)
	}
	h, err := tools.ReadHints(&tool)
	if err != nil {
		t.Fatalf("ReadHints: %v", err)
	}
	if !h.Publish || !h.Streaming || !h.PartialOutput || !h.Cancellation || h.SideEffects || h.ApprovalRequired || h.TargetProtocol != tools.TargetNative {
		t.Errorf("hints = %+v", h)
	}

	m.Tools[0].Name = "changed"
	m.Tools[0].Metadata["a2a.expose"] = json.RawMessage(`false`)
	if again := s.Manifest(); again.Tools[0].Name != conformance.ToolName || string(again.Tools[0].Metadata["a2a.expose"]) != "true" {
		t.Error("Manifest shares state between calls")
	}
}

// End to end through the tools package: registered, exposed on A2A only,
// publishable on a streaming A2A edge, dispatchable and cancellable.
func TestThroughRegistry(t *testing.T) {
	s := conformance.New(conformance.WithResubscribeHold(time.Hour))
	r := tools.NewRegistry()
	if err := r.Register(s); err != nil {
		t.Fatalf("Register: %v", err)
	}
	a2a := tools.Exposure{Protocol: "a2a"}
	exposed := r.Exposed(a2a)
	if len(exposed) != 1 || exposed[0].Tool.Name != conformance.ToolName {
		t.Fatalf("Exposed(a2a) = %v", exposed)
	}
	if got := r.Exposed(tools.Exposure{Protocol: "acp"}); len(got) != 0 {
		t.Errorf("Exposed(acp) = %v", got)
	}
	if f := tools.A2AFidelity(exposed[0].Tool, tools.A2AProfile{}); !f.Publishable() {
		t.Errorf("A2AFidelity = %+v", f)
	}

	en, err := r.ResolveTool(a2a, conformance.ToolName)
	if err != nil {
		t.Fatalf("ResolveTool: %v", err)
	}
	var chunks []tools.Chunk
	err = en.InvokeStream(context.Background(), "rcpt-1", json.RawMessage(userMessage("tck-message-response-1", `[{"text":"x"}]`)), func(c tools.Chunk) error {
		chunks = append(chunks, c)
		return nil
	})
	if err != nil {
		t.Fatalf("InvokeStream: %v", err)
	}
	check(t, chunks, []want{reply(is("Direct message response"))})
	if _, err := en.Invoke(context.Background(), "rcpt-2", json.RawMessage(userMessage("m", `[{"text":"x"}]`))); !errors.Is(err, conformance.ErrStreamOnly) {
		t.Errorf("Invoke = %v, want ErrStreamOnly", err)
	}

	working := make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- en.InvokeStream(context.Background(), "rcpt-3", json.RawMessage(userMessage("test-resubscribe-message-id-9", `[{"text":"x"}]`)), func(tools.Chunk) error {
			close(working)
			return nil
		})
	}()
	<-working
	if err := en.Cancel(context.Background(), "rcpt-3"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if err := <-result; !errors.Is(err, tools.ErrCanceled) {
		t.Errorf("InvokeStream = %v, want ErrCanceled", err)
	}
}
