package dispatch

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// countingServer wraps hello and counts invocations, or fails on demand.
type countingServer struct {
	*hello.Server
	runs   atomic.Int64
	fail   bool
	panics bool
	err    error
}

func (s *countingServer) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	s.runs.Add(1)
	if s.panics {
		panic("tool bug")
	}
	if s.fail {
		return nil, errors.New("backend unavailable")
	}
	if s.err != nil {
		return nil, s.err
	}
	return s.Server.Invoke(ctx, inv)
}

func (s *countingServer) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	s.runs.Add(1)
	return s.Server.InvokeStream(ctx, inv, emit)
}

type fixture struct {
	js     jetstream.JetStream
	k      *kernel.Kernel
	d      *Dispatcher
	server *countingServer
	token  string
}

func setup(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	_, _, js := natstest.Start(t)
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	srv := &countingServer{Server: hello.New()}
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := New(ctx, js, k, reg, "edge-test", 1, opts...)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: "cap-dispatch", Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject:  schemas.EncodePublicKey(agent.Public().(ed25519.PublicKey)),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: "hello-a2a-srv", ToolName: "hello_task", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, _ := schemas.EncodeCapabilityHeader(tok)
	return &fixture{js: js, k: k, d: d, server: srv, token: h}
}

// events reads every event on the stream, by subject.
func (f *fixture) events(t *testing.T) map[string][][]byte {
	t.Helper()
	ctx := context.Background()
	c, err := f.js.OrderedConsumer(ctx, schemas.EventsStream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][][]byte{}
	batch, err := c.FetchNoWait(1000)
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		evs, err := schemas.UnpackEvents(m.Subject(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			out[e.Subject] = append(out[e.Subject], e.Data)
		}
	}
	return out
}

func TestAllowedCallIsDurableBeforeAndAfter(t *testing.T) {
	f := setup(t)
	res, err := f.d.Do(context.Background(), Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task",
		Arguments: json.RawMessage(`{"text":"world"}`), Metadata: map[string]any{"protocol": "a2a"}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Decision.Allow || !res.Ran || res.Outcome != schemas.OutcomeCompleted || !res.OutcomeDurable || f.server.runs.Load() != 1 {
		t.Fatalf("%+v", res)
	}
	ev := f.events(t)
	var dec schemas.DecisionEvent
	var out schemas.OutcomeEvent
	if len(ev[schemas.SubjectDecision]) != 1 || len(ev[schemas.SubjectOutcome]) != 1 {
		t.Fatalf("events: %v", ev)
	}
	_ = json.Unmarshal(ev[schemas.SubjectDecision][0], &dec)
	_ = json.Unmarshal(ev[schemas.SubjectOutcome][0], &out)
	if dec.ReceiptID != res.ReceiptID || dec.CapabilityID != "cap-dispatch" || dec.Decision.Verdict != schemas.VerdictAllow || dec.Validate() != nil {
		t.Fatalf("decision event %+v", dec)
	}
	if !bytes.Contains(dec.Metadata, []byte(`"attribution"`)) || !bytes.Contains(dec.Metadata, []byte(`"protocol":"a2a"`)) {
		t.Fatalf("metadata %s", dec.Metadata)
	}
	if out.ContentHash != schemas.SHA256Hex(res.Output) || out.Outcome != schemas.OutcomeCompleted {
		t.Fatalf("outcome %+v for output %s", out, res.Output)
	}
}

// TestOutcomeMetadataAndUnknownOutcomes: an edge's outcome metadata rides
// on the outcome event; a tool cut off with ErrOutcomeUnknown leaves the
// call without an outcome (the ledger will close it as incomplete), but
// its decision is durable.
func TestOutcomeMetadataAndUnknownOutcomes(t *testing.T) {
	cases := []struct {
		name     string
		err      error
		outcomes int
		meta     string
	}{
		{"completed", nil, 1, `{"permission":{"answered_by":"human"}}`},
		{"failed", errors.New("refused by the editor"), 1, `{"permission":{"answered_by":"human"}}`},
		{"cut off", fmt.Errorf("agent gone: %w", tools.ErrOutcomeUnknown), 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := setup(t)
			f.server.err = tc.err
			res, err := f.d.Do(context.Background(), Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task",
				Arguments: json.RawMessage(`{}`), OutcomeMetadata: func(*Result) map[string]any {
					return map[string]any{"permission": map[string]any{"answered_by": "human"}}
				}})
			if err != nil {
				t.Fatal(err)
			}
			ev := f.events(t)
			if !res.Ran || len(ev[schemas.SubjectDecision]) != 1 || len(ev[schemas.SubjectOutcome]) != tc.outcomes {
				t.Fatalf("ran %v, events %d decisions, %d outcomes", res.Ran, len(ev[schemas.SubjectDecision]), len(ev[schemas.SubjectOutcome]))
			}
			if tc.outcomes == 0 {
				if res.OutcomeDurable {
					t.Fatal("an unwritten outcome reported durable")
				}
				return
			}
			var out schemas.OutcomeEvent
			_ = json.Unmarshal(ev[schemas.SubjectOutcome][0], &out)
			if string(out.Metadata) != tc.meta {
				t.Fatalf("outcome metadata %s, want %s", out.Metadata, tc.meta)
			}
		})
	}
}

func TestStreamedCallHashesChunkDigests(t *testing.T) {
	f := setup(t)
	var seen int
	res, err := f.d.Do(context.Background(), Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task",
		Arguments: json.RawMessage(`{"text":"stream"}`), Stream: true, Emit: func(tools.Chunk) error { seen++; return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Chunks) != 2 || seen != 2 {
		t.Fatalf("chunks %d, emitted %d", len(res.Chunks), seen)
	}
	h := sha256.New()
	for _, c := range res.Chunks {
		sum := sha256.Sum256(c.Data)
		h.Write(sum[:])
	}
	var out schemas.OutcomeEvent
	_ = json.Unmarshal(f.events(t)[schemas.SubjectOutcome][0], &out)
	if out.ContentHash != hex.EncodeToString(h.Sum(nil)) {
		t.Fatalf("content hash %s", out.ContentHash)
	}
}

func TestDeniedAndFailedCalls(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	res, err := f.d.Do(ctx, Call{Token: "forged", ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Decision.Allow || res.Ran || f.server.runs.Load() != 0 {
		t.Fatalf("forged token: %+v %v", res, err)
	}
	f.server.fail = true
	res, err = f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Outcome != schemas.OutcomeFailed || res.ToolErr == nil {
		t.Fatalf("failing tool: %+v %v", res, err)
	}
	ev := f.events(t)
	if len(ev[schemas.SubjectDecision]) != 2 || len(ev[schemas.SubjectOutcome]) != 1 {
		t.Fatalf("want two decisions and one outcome, got %d and %d", len(ev[schemas.SubjectDecision]), len(ev[schemas.SubjectOutcome]))
	}
	if !bytes.Contains(ev[schemas.SubjectOutcome][0], []byte("backend unavailable")) {
		t.Fatalf("failure reason missing: %s", ev[schemas.SubjectOutcome][0])
	}
	// Arguments JCS refuses are refused before the kernel: no decision, so
	// no budget charged and no receipt owed.
	// So are numbers JCS would change in value (the tool gets the
	// canonical arguments).
	for _, args := range []string{`[1]`, `"x"`, `{`, `null`, `{"a":1,"a":2}`, `{"n":1e400}`, `{"s":"\ud800"}`,
		`{"id":9007199254740993}`, `{"a":[{"p":0.30000000000000000001}]}`} {
		if _, err := f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(args)}); !errors.Is(err, ErrBadArguments) {
			t.Fatalf("arguments %s: %v", args, err)
		}
	}
	if n := len(f.events(t)[schemas.SubjectDecision]); n != 2 {
		t.Fatalf("%d decision events after refused arguments, want the 2 before", n)
	}
	// Numbers whose value survives run: 1.10 is 1.1, 1e2 is 100.
	for _, args := range []string{`{"price":1.10,"n":1e2,"id":9007199254740992,"p":0.1,"z":-0}`} {
		if _, err := f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(args)}); err != nil {
			t.Fatalf("arguments %s: %v", args, err)
		}
	}
}

// Refuse records the deny receipt of a call refused on the kernel's
// Identify decision, runs nothing, and takes no allow decision.
func TestRefuseRecordsTheDenial(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	call := Call{Token: "forged", ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)}
	_, d := f.k.Identify(context.Background(), "forged", nil)
	if d == nil {
		t.Fatal("a forged token identified")
	}
	res, err := f.d.Refuse(ctx, call, d)
	if err != nil || res.Ran || res.ReceiptID == "" || f.server.runs.Load() != 0 {
		t.Fatalf("refuse: %+v %v", res, err)
	}
	decisions := f.events(t)[schemas.SubjectDecision]
	if len(decisions) != 1 || !bytes.Contains(decisions[0], []byte(res.ReceiptID)) || !bytes.Contains(decisions[0], []byte(`"deny"`)) {
		t.Fatalf("decision events %s", decisions)
	}
	if _, err := f.d.Refuse(ctx, call, &kernel.Decision{Allow: true}); err == nil {
		t.Fatal("an allow decision was refused as a deny")
	}
	if _, err := f.d.Refuse(ctx, call, nil); err == nil {
		t.Fatal("a nil decision was accepted")
	}
}

// No tool runs without a durable decision event: with the stream refusing
// writes (sealed), an allowed call is refused before the tool.
func TestNoToolRunsWithoutADurableDecision(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	cfg := schemas.EventsStreamConfig(1)
	cfg.Sealed = true
	if _, err := f.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	_, err := f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if !errors.Is(err, ErrNotDurable) || f.server.runs.Load() != 0 {
		t.Fatalf("err %v, tool runs %d", err, f.server.runs.Load())
	}
}

// A panicking tool fails its call; the process and the outcome survive.
func TestToolPanicFailsTheCall(t *testing.T) {
	f := setup(t)
	f.server.panics = true
	res, err := f.d.Do(context.Background(), Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if err != nil || res.Outcome != schemas.OutcomeFailed || !res.OutcomeDurable || !strings.Contains(res.ToolErr.Error(), "panicked") {
		t.Fatalf("%+v %v", res, err)
	}
}

// A decision event whose parts are each within bounds can still sum past
// the stream's message size with a long lineage: its grants go first,
// then the lineage, and the event always fits.
func TestDecisionEventFitsTheStream(t *testing.T) {
	big := strings.Repeat("x", schemas.MaxParametersBytes-16)
	grants := make([]schemas.ToolGrant, schemas.MaxGrants)
	for i := range grants {
		grants[i] = schemas.ToolGrant{ServerID: strings.Repeat("s", 200), ToolName: strings.Repeat("t", 200), Operations: []schemas.Operation{schemas.OpInvoke}}
	}
	var lineage []schemas.CapabilityLineage
	for i := range schemas.MaxDelegationDepth + 1 {
		l := schemas.CapabilityLineage{CapabilityID: fmt.Sprintf("cap-%d", i), SubjectKey: "s", IssuerKey: "i", DelegationDepth: i, ScopeHash: "h", Grants: grants[:8]}
		if i > 0 {
			l.ParentCapabilityID = lineage[i-1].CapabilityID
		}
		lineage = append(lineage, l)
	}
	for _, tc := range []struct {
		name       string
		lineage    []schemas.CapabilityLineage
		wantGrants bool
		wantLin    bool
	}{
		{"small lineage kept whole", lineage[:2], true, true},
		{"long lineage loses its grants", lineage, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept := slices.Clone(tc.lineage)
			ev := &schemas.DecisionEvent{Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID("r"), ReceiptID: "r", Timestamp: 1,
				CapabilityID: "c", ToolServer: "s", ToolName: "t", Parameters: json.RawMessage(`{"p":"` + big + `"}`),
				Decision: schemas.Decision{Verdict: schemas.VerdictAllow}, PolicyHash: "p", Metadata: json.RawMessage(`{"m":"` + strings.Repeat("m", 7000) + `"}`),
				CapabilityLineage: tc.lineage}
			raw, err := fitEvent(ev)
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := json.Marshal(ev); !bytes.Equal(raw, again) {
				t.Fatal("fitEvent's bytes are not the event's")
			}
			if len(raw) > schemas.MaxEventBytes || ev.Validate() != nil {
				t.Fatalf("event of %d bytes, %v", len(raw), ev.Validate())
			}
			if (len(ev.CapabilityLineage) > 0) != tc.wantLin || tc.wantLin && (len(ev.CapabilityLineage[0].Grants) > 0) != tc.wantGrants {
				t.Fatalf("lineage %+v", ev.CapabilityLineage)
			}
			if !reflect.DeepEqual(kept, tc.lineage) {
				t.Fatal("the caller's lineage records were changed")
			}
		})
	}
}

// While no stream answers (a cluster electing a leader looks the same:
// "no responders"), the decision is retried until one does, and the call
// then goes through with both its events, once each.
func TestPublishRetriesUntilJetStreamAnswers(t *testing.T) {
	f := setup(t)
	ctx := context.Background()
	if err := f.js.DeleteStream(ctx, schemas.EventsStream); err != nil {
		t.Fatal(err)
	}
	back := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		_, err := f.js.CreateStream(ctx, schemas.EventsStreamConfig(1))
		back <- err
	}()
	res, err := f.d.Do(ctx, Call{Token: f.token, ServerID: "hello-a2a-srv", ToolName: "hello_task", Arguments: json.RawMessage(`{}`)})
	if err != nil || <-back != nil {
		t.Fatalf("call while the stream was away: %v", err)
	}
	if !res.Decision.Allow || !res.OutcomeDurable || f.server.runs.Load() != 1 {
		t.Fatalf("allow %v, outcome durable %v, runs %d", res.Decision.Allow, res.OutcomeDurable, f.server.runs.Load())
	}
	ev := f.events(t)
	if len(ev[schemas.SubjectDecision]) != 1 || len(ev[schemas.SubjectOutcome]) != 1 {
		t.Fatalf("events: %d decisions, %d outcomes", len(ev[schemas.SubjectDecision]), len(ev[schemas.SubjectOutcome]))
	}
}
