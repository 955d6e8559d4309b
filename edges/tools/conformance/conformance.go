// Package conformance is the built-in demo tool server the public A2A
// conformance kit (a2a-tck) runs against: one A2A-native tool,
// "conformance", whose behaviour is chosen by the prefix of the incoming
// message's messageId (the kit has no other side channel).
//
// An A2A-native tool (tools.MetaA2ANative) takes {"message": <the A2A 1.0
// Message in ProtoJSON>} as arguments and streams one A2A 1.0
// StreamResponse-like object per chunk: {"message":…}, {"statusUpdate":…} or
// {"artifactUpdate":…}. The A2A edge fills in taskId and contextId, so the
// tool never emits them. A direct message is the only chunk; a terminal or
// interrupted status is the last one.
//
// The behaviours, longest prefix first where prefixes overlap:
//
//	tck-stream-artifact-chunked  working → artifact "chunk-1 " → same artifact "chunk-2" (append, lastChunk) → completed
//	tck-stream-artifact-text     working → text artifact → completed
//	tck-stream-artifact-file     working → raw file artifact → completed
//	tck-stream-ordering-001      working → text artifact → completed
//	tck-stream-001, -003         working → text artifact → completed
//	tck-stream-002               completed, with a message
//	test-resubscribe-message-id  working, hold (WithResubscribeHold; cancellable) → completed
//	tck-complete-task            completed with the message "Hello from TCK"
//	tck-artifact-file-url        url file artifact → completed
//	tck-artifact-file            raw file artifact → completed
//	tck-artifact-text            text artifact "Generated text content" → completed
//	tck-artifact-data            data artifact {"key":"value","count":42} → completed
//	tck-message-response         the direct message "Direct message response"
//	tck-input-required           working → input-required, with a message
//	tck-reject-task              rejected, with a message saying so
//	tck-auth-required            working → auth-required, with a message
//	tck-long-running             working, hold (WithLongRunningHold, 10 min; cancellable) → completed
//	tck-conversation             working → input-required with an echo: the task takes follow-ups
//	                             and stays open (cancellable) until a tck-complete-task message;
//	                             the 0.3 kit's test-message-id, text-message-id,
//	                             test-history-create-message-id, cancel-test-message-id and
//	                             mapping-test-message-id do the same
//	a follow-up (taskId set)     as tck-conversation, unless its prefix selects another behaviour
//	anything else                completed with an echo of the text (else data) parts
package conformance

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// Identity of the server and its tool.
const (
	ServerID = "a2a-conformance"
	ToolName = "conformance"
)

// DefaultResubscribeHold is how long a test-resubscribe-message-id task stays
// working: the kit needs at least twice its streaming timeout (2 s by
// default), and its reference agents hold for 4 s.
const DefaultResubscribeHold = 4 * time.Second

// DefaultLongRunningHold is how long a tck-long-running task works before
// it completes, unless it is canceled first.
const DefaultLongRunningHold = 10 * time.Minute

// ErrStreamOnly is returned by Invoke: the tool answers only through
// InvokeStream. It wraps errors.ErrUnsupported.
var ErrStreamOnly = fmt.Errorf("%s is stream-only; call InvokeStream: %w", ToolName, errors.ErrUnsupported)

// A2A 1.0 task states (ProtoJSON enum names) the tool emits.
const (
	StateWorking       = "TASK_STATE_WORKING"
	StateInputRequired = "TASK_STATE_INPUT_REQUIRED"
	StateAuthRequired  = "TASK_STATE_AUTH_REQUIRED"
	StateCompleted     = "TASK_STATE_COMPLETED"
	StateFailed        = "TASK_STATE_FAILED"
	StateRejected      = "TASK_STATE_REJECTED"
)

// Fixed contents the kit asserts on.
const (
	TextCompleteTask    = "Hello from TCK"
	TextArtifact        = "Generated text content"
	TextMessageResponse = "Direct message response"
	FileName            = "output.txt"
	FileMediaType       = "text/plain"
	FileURL             = "https://example.com/output.txt"
	// FileContent is the content of the raw file artifacts, sent base64-encoded.
	FileContent = "Generated file content"
)

// Server is the conformance tool server. The embedded Running provides
// Cancel. It is safe for concurrent use.
type Server struct {
	tools.Running
	hold, longHold time.Duration
}

var _ tools.Server = (*Server)(nil)

// Option configures a Server.
type Option func(*Server)

// WithLongRunningHold sets how long a tck-long-running task works before it
// completes (DefaultLongRunningHold when not given; negative is zero).
func WithLongRunningHold(d time.Duration) Option {
	return func(s *Server) { s.longHold = max(d, 0) }
}

// WithResubscribeHold sets how long a test-resubscribe-message-id task stays
// working before it completes (DefaultResubscribeHold when not given). A
// negative duration is treated as zero.
func WithResubscribeHold(d time.Duration) Option {
	return func(s *Server) { s.hold = max(d, 0) }
}

// New returns a conformance server.
func New(opts ...Option) *Server {
	s := &Server{hold: DefaultResubscribeHold, longHold: DefaultLongRunningHold}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

// Manifest returns a fresh copy on every call, so no caller can change
// another's view of it.
func (s *Server) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{
		Schema:      schemas.ManifestSchema,
		ServerID:    ServerID,
		Name:        "A2A Conformance Demo Server",
		Description: "The demo agent the public A2A conformance kit (a2a-tck) expects, selected by messageId prefix",
		Version:     "0.1.0",
		Tools: []schemas.ToolDefinition{{
			Name: ToolName,
			Description: "A2A-native conformance demo agent: answers an A2A message as the a2a-tck kit expects " +
				"(complete, artifacts, direct message, input required, reject, streaming, long-running), chosen by messageId prefix; " +
				"anything else is echoed",
			InputSchema: json.RawMessage(`{"type":"object","x-chio-streaming":true,"x-chio-partial-output":true,` +
				`"x-chio-cancellation":true,"properties":{"message":{"type":"object"}},"required":["message"]}`),
			HasSideEffects: false,
			// Almost every behaviour answers at once; only the resubscribe
			// task holds, and it is cancellable.
			LatencyHint: schemas.LatencyFast,
			Metadata: map[string]json.RawMessage{
				"a2a.expose":        json.RawMessage(`true`),
				tools.MetaA2ANative: json.RawMessage(`true`),
			},
		}},
	}
}

// ServerID returns "a2a-conformance".
func (s *Server) ServerID() string { return ServerID }

// ToolNames returns the one tool.
func (s *Server) ToolNames() []string { return []string{ToolName} }

// Invoke checks that inv is for this tool and then refuses with
// ErrStreamOnly: an A2A-native tool answers only through InvokeStream.
func (s *Server) Invoke(_ context.Context, inv tools.Invocation) (json.RawMessage, error) {
	if err := checkTool(inv); err != nil {
		return nil, fmt.Errorf("invoke: %w", err)
	}
	return nil, fmt.Errorf("invoke: %w", ErrStreamOnly)
}

// InvokeStream answers the A2A message in the arguments with the chunk
// sequence its messageId prefix selects (see the package documentation).
// The final chunk has Last set. Cancel, or the end
// of ctx, stops it between chunks and during the resubscribe hold with the
// context's cause (tools.ErrCanceled for Cancel).
func (s *Server) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	if emit == nil {
		return errors.New("invoke stream: emit is nil")
	}
	msg, err := arguments(inv)
	if err != nil {
		return fmt.Errorf("invoke stream: %w", err)
	}
	steps := s.plan(msg)

	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return fmt.Errorf("invoke stream %s: %w", ToolName, err)
	}
	defer finish()
	for i, st := range steps {
		if err := s.wait(runCtx, st.holdBefore); err != nil {
			return fmt.Errorf("invoke stream %s: %w", ToolName, err)
		}
		if runCtx.Err() != nil {
			return fmt.Errorf("invoke stream %s: %w", ToolName, context.Cause(runCtx))
		}
		data, err := encode(st.event)
		if err != nil {
			return fmt.Errorf("invoke stream %s: encode chunk %d: %w", ToolName, i, err)
		}
		if err := emit(tools.Chunk{Data: data, Last: i == len(steps)-1}); err != nil {
			return fmt.Errorf("invoke stream %s: emit chunk %d: %w", ToolName, i, err)
		}
	}
	return nil
}

// wait returns after d, or earlier with the context's cause when ctx ends.
func (s *Server) wait(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// ---- the behaviours ----

// step is one chunk, emitted after holding for holdBefore.
type step struct {
	holdBefore time.Duration
	event      streamResponse
}

// behaviour is what a messageId prefix selects.
type behaviour struct {
	prefix string
	steps  func(s *Server, m *message) []step
}

// behaviours are matched in order, so a prefix that extends another comes
// first (tck-artifact-file-url before tck-artifact-file).
var behaviours = []behaviour{
	{"tck-stream-artifact-chunked", func(*Server, *message) []step {
		id := newID()
		return []step{
			status(StateWorking, nil),
			artifactUpdate(artifact{ArtifactID: id, Name: "chunked-artifact", Parts: []part{textPart("chunk-1 ")}}, false, false),
			artifactUpdate(artifact{ArtifactID: id, Name: "chunked-artifact", Parts: []part{textPart("chunk-2")}}, true, true),
			status(StateCompleted, nil),
		}
	}},
	{"tck-stream-artifact-text", streamed(textPart("Streamed text content"))},
	{"tck-stream-artifact-file", streamed(rawFilePart())},
	{"tck-stream-ordering-001", streamed(textPart("Ordered output"))},
	{"tck-stream-001", streamed(textPart("Stream hello from TCK"))},
	{"tck-stream-002", func(*Server, *message) []step {
		return []step{status(StateCompleted, agentMessage(textPart("Stream completed")))}
	}},
	{"tck-stream-003", streamed(textPart("Stream task lifecycle"))},
	{"test-resubscribe-message-id", func(s *Server, _ *message) []step {
		done := status(StateCompleted, agentMessage(textPart("Resubscribe task completed")))
		done.holdBefore = s.hold
		return []step{status(StateWorking, nil), done}
	}},
	{"tck-complete-task", func(*Server, *message) []step {
		return []step{status(StateCompleted, agentMessage(textPart(TextCompleteTask)))}
	}},
	{"tck-artifact-file-url", artifactThenCompleted(part{URL: FileURL, Filename: FileName, MediaType: FileMediaType})},
	{"tck-artifact-file", artifactThenCompleted(rawFilePart())},
	{"tck-artifact-text", artifactThenCompleted(textPart(TextArtifact))},
	{"tck-artifact-data", artifactThenCompleted(part{Data: json.RawMessage(`{"key":"value","count":42}`)})},
	{"tck-message-response", func(*Server, *message) []step {
		return []step{{event: streamResponse{Message: agentMessage(textPart(TextMessageResponse))}}}
	}},
	{"tck-input-required", func(*Server, *message) []step {
		return []step{
			status(StateWorking, nil),
			status(StateInputRequired, agentMessage(textPart("Input required: send a follow-up message to continue"))),
		}
	}},
	{"tck-reject-task", func(*Server, *message) []step {
		return []step{status(StateRejected, agentMessage(textPart("The task was rejected by the conformance agent")))}
	}},
	{"tck-auth-required", func(*Server, *message) []step {
		return []step{
			status(StateWorking, nil),
			status(StateAuthRequired, agentMessage(textPart("Authorization required: send a follow-up message once authorized"))),
		}
	}},
	{"tck-long-running", func(s *Server, _ *message) []step {
		done := status(StateCompleted, agentMessage(textPart("Long-running task completed")))
		done.holdBefore = s.longHold
		return []step{status(StateWorking, nil), done}
	}},
	{"tck-conversation", conversation},
	// The 0.3 kit's names for tasks it continues (continuation, history)
	// or cancels after a blocking send: each must come back not terminal.
	{"test-message-id", conversation},
	{"text-message-id", conversation},
	{"test-history-create-message-id", conversation},
	{"cancel-test-message-id", conversation},
	{"mapping-test-message-id", conversation},
}

// plan returns the chunks that answer m. A follow-up message on a task
// (taskId set) that selects no behaviour goes on with the conversation.
func (s *Server) plan(m *message) []step {
	for _, b := range behaviours {
		if strings.HasPrefix(m.MessageID, b.prefix) {
			return b.steps(s, m)
		}
	}
	if m.TaskID != "" {
		return conversation(s, m)
	}
	return []step{status(StateCompleted, agentMessage(textPart(echo(m))))}
}

// conversation echoes the message and asks for the next one: the task
// waits in input-required, takes follow-ups and can be canceled, until a
// tck-complete-task message ends it.
func conversation(_ *Server, m *message) []step {
	return []step{
		status(StateWorking, nil),
		status(StateInputRequired, agentMessage(textPart(echo(m)+"\n(send another message; one whose messageId starts with tck-complete-task ends the task)"))),
	}
}

// streamed is working → one artifact → completed.
func streamed(p part) func(*Server, *message) []step {
	return func(*Server, *message) []step {
		return []step{
			status(StateWorking, nil),
			artifactUpdate(artifact{ArtifactID: newID(), Name: "output", Parts: []part{p}}, false, true),
			status(StateCompleted, nil),
		}
	}
}

// artifactThenCompleted is one artifact → completed.
func artifactThenCompleted(p part) func(*Server, *message) []step {
	return func(*Server, *message) []step {
		return []step{
			artifactUpdate(artifact{ArtifactID: newID(), Name: "output", Parts: []part{p}}, false, true),
			status(StateCompleted, nil),
		}
	}
}

// echo renders the text of m's text parts, one per line, or else the JSON
// of its data parts.
func echo(m *message) string {
	var texts, data []string
	for _, p := range m.Parts {
		if p.Text != nil {
			texts = append(texts, *p.Text)
		} else if len(p.Data) > 0 {
			data = append(data, string(p.Data))
		}
	}
	switch {
	case len(texts) > 0:
		return strings.Join(texts, "\n")
	case len(data) > 0:
		return strings.Join(data, "\n")
	}
	return "Received a message with no text or data parts"
}

// ---- A2A 1.0 ProtoJSON shapes (only what the tool emits) ----

// streamResponse has exactly one member set.
type streamResponse struct {
	Message        *agentMsg            `json:"message,omitempty"`
	StatusUpdate   *statusUpdate        `json:"statusUpdate,omitempty"`
	ArtifactUpdate *artifactUpdateEvent `json:"artifactUpdate,omitempty"`
}

type agentMsg struct {
	MessageID string `json:"messageId"`
	Role      string `json:"role"`
	Parts     []part `json:"parts"`
}

type statusUpdate struct {
	Status taskStatus `json:"status"`
}

type taskStatus struct {
	State   string    `json:"state"`
	Message *agentMsg `json:"message,omitempty"`
}

type artifactUpdateEvent struct {
	Artifact  artifact `json:"artifact"`
	Append    bool     `json:"append,omitempty"` // ProtoJSON omits false
	LastChunk bool     `json:"lastChunk,omitempty"`
}

type artifact struct {
	ArtifactID string `json:"artifactId"`
	Name       string `json:"name,omitempty"`
	Parts      []part `json:"parts"`
}

// part is an outgoing Part: exactly one of Text, Raw, URL and Data is set.
type part struct {
	Text      *string         `json:"text,omitempty"`
	Raw       string          `json:"raw,omitempty"` // base64
	URL       string          `json:"url,omitempty"`
	Data      json.RawMessage `json:"data,omitempty"`
	Filename  string          `json:"filename,omitempty"`
	MediaType string          `json:"mediaType,omitempty"`
}

func textPart(s string) part { return part{Text: &s} }

func rawFilePart() part {
	return part{
		Raw:       base64.StdEncoding.EncodeToString([]byte(FileContent)),
		Filename:  FileName,
		MediaType: FileMediaType,
	}
}

func agentMessage(parts ...part) *agentMsg {
	return &agentMsg{MessageID: newID(), Role: "ROLE_AGENT", Parts: parts}
}

func status(state string, m *agentMsg) step {
	return step{event: streamResponse{StatusUpdate: &statusUpdate{Status: taskStatus{State: state, Message: m}}}}
}

func artifactUpdate(a artifact, appendTo, lastChunk bool) step {
	return step{event: streamResponse{ArtifactUpdate: &artifactUpdateEvent{Artifact: a, Append: appendTo, LastChunk: lastChunk}}}
}

// newID returns a UUIDv7, falling back to a random UUIDv4 should the clock
// source fail (uuid.New panics only when the random source does).
func newID() string {
	if id, err := uuid.NewV7(); err == nil {
		return id.String()
	}
	return uuid.NewString()
}

// ---- arguments ----

// message is the part of the incoming A2A Message the tool reads; unknown
// fields are ignored, as A2A asks (DM-SERIAL-005).
type message struct {
	MessageID string
	TaskID    string // set on a follow-up message
	Parts     []inPart
}

// inPart is an incoming part: Text is set for a text part, Data (non-empty,
// possibly "null") for a data part.
type inPart struct {
	Text *string
	Data json.RawMessage
}

// checkTool checks that inv names this server's tool.
func checkTool(inv tools.Invocation) error {
	if inv.ToolName != ToolName || (inv.ServerID != "" && inv.ServerID != ServerID) {
		return fmt.Errorf("tool %q on server %q: %w", inv.ToolName, inv.ServerID, tools.ErrUnknownTool)
	}
	return nil
}

// arguments checks inv and decodes its {"message": <A2A Message>} arguments:
// an object with only a "message" member, itself an object with a non-empty
// string messageId and a non-empty array of part objects; contextId and
// taskId, when present, must be strings, and a text part's text a string.
func arguments(inv tools.Invocation) (*message, error) {
	if err := checkTool(inv); err != nil {
		return nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(inv.Arguments, &top); err != nil || top == nil {
		return nil, fmt.Errorf("%s arguments must be a JSON object {\"message\": <A2A Message>}", ToolName)
	}
	for k := range top {
		if k != "message" {
			return nil, fmt.Errorf("%s arguments: unknown member %s", ToolName, abbreviate(k))
		}
	}
	raw, ok := top["message"]
	if !ok {
		return nil, fmt.Errorf("%s arguments: message is required", ToolName)
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("%s arguments: message must be a JSON object", ToolName)
	}

	var m message
	if err := stringField(fields, "messageId", "message.messageId", &m.MessageID); err != nil {
		return nil, err
	}
	if m.MessageID == "" {
		return nil, fmt.Errorf("%s arguments: message.messageId must be a non-empty string", ToolName)
	}
	for _, k := range []string{"contextId", "taskId", "role"} {
		if _, ok := fields[k]; ok {
			var s string
			if err := stringField(fields, k, "message."+k, &s); err != nil {
				return nil, err
			}
			if k == "taskId" {
				m.TaskID = s
			}
		}
	}
	var parts []json.RawMessage
	if rp, ok := fields["parts"]; !ok || json.Unmarshal(rp, &parts) != nil || len(parts) == 0 {
		return nil, fmt.Errorf("%s arguments: message.parts must be a non-empty array", ToolName)
	}
	for i, rp := range parts {
		var pf map[string]json.RawMessage
		if err := json.Unmarshal(rp, &pf); err != nil || pf == nil {
			return nil, fmt.Errorf("%s arguments: message.parts[%d] must be a JSON object", ToolName, i)
		}
		var p inPart
		if _, ok := pf["text"]; ok {
			var s string
			if err := stringField(pf, "text", fmt.Sprintf("message.parts[%d].text", i), &s); err != nil {
				return nil, err
			}
			p.Text = &s
		}
		if d, ok := pf["data"]; ok {
			var buf bytes.Buffer
			if err := json.Compact(&buf, d); err != nil {
				return nil, fmt.Errorf("%s arguments: message.parts[%d].data: %w", ToolName, i, err)
			}
			p.Data = buf.Bytes()
		}
		m.Parts = append(m.Parts, p)
	}
	return &m, nil
}

// stringField decodes fields[key] into dst, failing unless it is a JSON
// string; path names the field in the error.
func stringField(fields map[string]json.RawMessage, key, path string, dst *string) error {
	raw, ok := fields[key]
	if !ok || json.Unmarshal(raw, dst) != nil || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return fmt.Errorf("%s arguments: %s must be a JSON string", ToolName, path)
	}
	return nil
}

// abbreviate quotes an untrusted string for an error message, cut so a huge
// value cannot flood logs.
func abbreviate(s string) string {
	const limit = 64
	if len(s) > limit {
		return fmt.Sprintf("%q…", s[:limit])
	}
	return fmt.Sprintf("%q", s)
}

// encode marshals without HTML escaping and without the encoder's trailing
// newline.
func encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
