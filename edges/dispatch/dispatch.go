// Package dispatch runs one governed tool call, the part every protocol
// edge shares: ask the kernel, make the decision
// durable on JetStream, and only then run the tool and make its outcome
// durable. An edge translates its protocol to a Call and the Result back.
//
// Invariants: no tool runs unless its decision event was acknowledged by
// the stream; a Result carries a receipt id only when its decision event is
// durable, so the ledger will sign exactly one receipt for it (allow, deny,
// cancelled, or incomplete if the outcome never arrives).
package dispatch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/chio-ledger/chio/edges/eventwriter"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// ErrNotDurable means an event could not be made durable. For a decision,
// the call was refused and no tool ran.
var ErrNotDurable = errors.New("event not durable")

// ErrEventStoreUnavailable marks an ErrNotDurable whose cause is the event
// store itself (full, or not answering) rather than the call: every call
// fails alike until it is back, so an edge answers "unavailable, retry
// later" (HTTP 503, gRPC UNAVAILABLE) rather than an internal error. Its
// message starts with "event store unavailable:".
var ErrEventStoreUnavailable = eventwriter.ErrUnavailable

// notDurable is the error of an event of what (e.g. "decision of R") that
// the writer could not make durable: it matches ErrNotDurable and, when
// the store was the cause, ErrEventStoreUnavailable, whose message it
// then leads with.
func notDurable(what string, werr error) error {
	if errors.Is(werr, ErrEventStoreUnavailable) {
		return fmt.Errorf("%w (%w: %s, no tool ran)", werr, ErrNotDurable, what)
	}
	return fmt.Errorf("%w: %s: %v (no tool ran)", ErrNotDurable, what, werr)
}

// ErrBadArguments means the arguments are not a JSON object within the
// size bound: a protocol error, refused before the kernel.
var ErrBadArguments = errors.New("arguments must be a JSON object")

// Dispatcher runs governed calls. It is safe for concurrent use.
type Dispatcher struct {
	js       jetstream.JetStream
	kernel   *kernel.Kernel
	registry *tools.Registry
	edgeID   string
	now      func() time.Time
	w        *eventwriter.Writer
	wopts    []eventwriter.Option
	// edgeKey and edgeCredential name the signer of the events (WithEdgeSigner).
	edgeKey, edgeCredential string
	tracer                  trace.Tracer // nil: tracing off
}

// Option configures a Dispatcher.
type Option func(*Dispatcher)

// WithMetrics registers the Prometheus series of the dispatcher's event
// writer on reg: how long publishing a decision or outcome event to
// JetStream took (until its PubAck, which every call waits for), and how
// many events each write carried.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(d *Dispatcher) { d.wopts = append(d.wopts, eventwriter.WithMetrics(reg)) }
}

// WithEdgeSigner signs every message the dispatcher writes with the edge's
// key, and names the key and its credential in each decision.
func WithEdgeSigner(s *schemas.EdgeSigner) Option {
	return func(d *Dispatcher) {
		if s == nil {
			return
		}
		d.wopts = append(d.wopts, eventwriter.WithSigner(s))
		// The decision names the signer: its credential's edge id too.
		d.edgeID, d.edgeKey, d.edgeCredential = s.Credential().EdgeID, s.Credential().PublicKey, s.Credential().ID
	}
}

// WithClock sets the clock that stamps events (tests).
func WithClock(now func() time.Time) Option { return func(d *Dispatcher) { d.now = now } }

// New returns a dispatcher publishing to CHIO_EVENTS, creating the stream
// with the shared configuration if it does not exist (the ledger owns it). Allowed calls run on the
// in-process servers of reg.
func New(ctx context.Context, js jetstream.JetStream, k *kernel.Kernel, reg *tools.Registry, edgeID string, replicas int, opts ...Option) (*Dispatcher, error) {
	if _, err := schemas.OpenStream(ctx, js, schemas.EventsStreamConfig(replicas)); err != nil {
		return nil, fmt.Errorf("dispatch: events stream: %w", err)
	}
	d := &Dispatcher{js: js, kernel: k, registry: reg, edgeID: edgeID, now: time.Now}
	for _, o := range opts {
		o(d)
	}
	d.w = eventwriter.New(js, d.wopts...)
	// Whether the stream's consumers read envelopes, known before the
	// first call; a failed look leaves each event its own message, which
	// every consumer reads, and the writer looks again by itself.
	if err := d.w.Look(ctx); err != nil {
		slog.Debug("dispatch: first look at the events stream's consumers", "err", err)
	}
	return d, nil
}

// Call is one tool call as an edge received it.
type Call struct {
	// ReceiptID is assigned (UUIDv7) when empty.
	ReceiptID string
	Token     string
	// Proof is the caller's proof of possession of the token's subject
	// key, nil for a bearer call.
	Proof     *kernel.Proof
	ServerID  string
	ToolName  string
	Arguments json.RawMessage
	// Exposure is the edge's audience (see kernel.Request).
	Exposure *tools.Exposure
	// Stream runs the tool with InvokeStream, collecting its chunks.
	Stream bool
	// RequestID, TaskID and TenantID are recorded on the decision event.
	RequestID, TaskID, TenantID string
	// Metadata is merged into the decision event's metadata (e.g. the
	// protocol); the kernel's attribution is added.
	Metadata map[string]any
	// GovernedIntent is the caller's declared intent, if any: the kernel
	// checks it against the call, the decision event carries it and the
	// ledger signs it into the receipt.
	GovernedIntent *schemas.GovernedIntent
	// Emit, if set, receives each chunk of a streamed call as it comes.
	Emit func(tools.Chunk) error
	// Finish, if set, is the edge's own durable write of the call's
	// second round (the A2A edge: the task, with its result and terminal
	// state). It runs concurrently with the outcome event's write, or after
	// the decision of a denied call. It is not called when Do returns an
	// error.
	Finish func(ctx context.Context, res *Result) error
	// OutcomeMetadata, if set, gives metadata for the outcome event once
	// the tool has run (e.g. the answer a human gave); the ledger adds its
	// keys to the receipt's metadata, never over the decision's.
	OutcomeMetadata func(res *Result) map[string]any
	// OutcomeWithin, if set, is how long an allowed call may rightly take
	// (a person answering): its decision event then carries an
	// outcome_deadline that long after it (at most
	// schemas.MaxOutcomeDeadline), and the ledger does not end it
	// incomplete before then.
	OutcomeWithin time.Duration

	// traceID is the call's trace id when it is traced, for its
	// decision event.
	traceID string

	// entry is the registered tool the kernel decided under (Decision.Tool),
	// so that one lookup governs the decision, the manifest the receipt
	// names and the run, even if the server's tools are replaced meanwhile.
	entry *tools.Entry
}

// Result is what happened.
type Result struct {
	ReceiptID string
	Decision  *kernel.Decision
	// Ran reports whether the tool was invoked.
	Ran bool
	// Output of Invoke, or the chunks of InvokeStream.
	Output json.RawMessage
	Chunks []tools.Chunk
	// Outcome is set when the tool ran; ToolErr is its error, if any.
	Outcome schemas.Outcome
	ToolErr error
	// OutcomeDurable reports that the outcome event was acknowledged; if
	// not, the ledger will record the call as incomplete.
	OutcomeDurable bool
	// FinishErr is Call.Finish's error.
	FinishErr error
}

// Do runs the call. It returns an error only when no receipt will exist
// for the call: bad arguments, or a decision event that is not durable.
//
// A call makes at most two rounds of durable writes: the decision event
// before the tool runs; then the outcome event with, concurrently, the
// edge's own record of the result (Call.Finish). Each event goes through
// the process's one coalescing writer (edges/eventwriter), so concurrent
// calls share their writes.
func (d *Dispatcher) Do(ctx context.Context, c Call) (res *Result, err error) {
	ctx, c, end, err := d.begin(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() { end(res, err) }()
	c, res, err = d.decided(ctx, c)
	if err != nil {
		return nil, err
	}
	dec := res.Decision
	if !dec.Allow {
		if c.Finish != nil {
			res.FinishErr = d.finish(ctx, c.Finish, res)
		}
		return res, nil
	}
	res.Ran = true
	inv := tools.Invocation{ID: c.ReceiptID, ServerID: c.ServerID, ToolName: c.ToolName, Arguments: c.Arguments,
		Governance: &tools.Governance{RequestID: c.RequestID, ReceiptID: c.ReceiptID, Subject: dec.Subject, Intent: c.GovernedIntent}}
	contentHash := d.traceRun(ctx, c, inv, res)
	if errors.Is(res.ToolErr, tools.ErrOutcomeUnknown) {
		// No outcome: the ledger's timeout makes the receipt incomplete.
		if c.Finish != nil {
			res.FinishErr = d.finish(context.WithoutCancel(ctx), c.Finish, res)
		}
		return res, nil
	}
	if contentHash == "" {
		contentHash = schemas.EmptyContentHash
	}
	outcome, reason := schemas.OutcomeCompleted, ""
	switch {
	case res.ToolErr == nil:
	case errors.Is(res.ToolErr, context.Canceled) || errors.Is(res.ToolErr, tools.ErrCanceled):
		outcome, reason = schemas.OutcomeCancelled, "cancelled while running"
	case errors.Is(res.ToolErr, schemas.ErrTaskTerminal):
		// The task the tool was writing to ended under it (a cancel
		// that won the race to the task's next commit): cancelled, not
		// a tool failure.
		outcome, reason = schemas.OutcomeCancelled, schemas.TruncateText("cancelled while running: "+res.ToolErr.Error())
	default:
		outcome, reason = schemas.OutcomeFailed, schemas.TruncateText(res.ToolErr.Error())
	}
	out := &schemas.OutcomeEvent{
		Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(c.ReceiptID), ReceiptID: c.ReceiptID,
		Timestamp: d.stamp(), Outcome: outcome, Reason: reason, ContentHash: contentHash,
	}
	res.Outcome = out.Outcome
	if c.OutcomeMetadata != nil {
		// Metadata that does not encode is left out: the tool has run,
		// so the outcome must be written whatever it carries.
		if m := c.OutcomeMetadata(res); len(m) > 0 {
			if raw, err := schemas.Canonical(m); err == nil {
				out.Metadata = raw
			}
		}
	}
	res.OutcomeDurable = d.writeOutcome(ctx, out, c.Finish, res) == nil
	return res, nil
}

// decided asks the kernel about c and makes its decision durable: the
// first round of Do and Authorize.
func (d *Dispatcher) decided(ctx context.Context, c Call) (Call, *Result, error) {
	dec := d.kernel.Decide(ctx, &kernel.Request{
		Token: c.Token, ServerID: c.ServerID, ToolName: c.ToolName, Arguments: c.Arguments, Exposure: c.Exposure,
		RequestID: c.RequestID, GovernedIntent: c.GovernedIntent, Proof: c.Proof,
	})
	c.entry = dec.Tool
	if c.entry == nil {
		// A kernel without a registry (or a call it refused before
		// resolving the tool): the dispatcher's own lookup is the only one.
		c.entry, _ = d.registry.Tool(c.ServerID, c.ToolName)
	}
	res, err := d.decide(ctx, c, dec)
	if err != nil {
		return c, nil, err
	}
	if res.Decision != dec {
		// Allowed, but its proof was spent before (or its one-time state
		// is unreachable): refused before the tool, on the record.
		if err := d.refuseAllowed(ctx, c, res.Decision); err != nil {
			return c, nil, err
		}
	}
	return c, res, nil
}

// NotObservedReason is the reason an Authorize outcome records.
const NotObservedReason = "decided for a gateway that carries the call out and does not report its result"

// Authorize decides c for a policy enforcement point outside Chio (a
// gateway's forward authentication, Envoy's ext_authz, an AuthZEN
// client) that will carry the call out itself. Nothing runs here. An
// allowed call's outcome is recorded at once as not_observed, so its
// receipt is an allow that says nobody reported the result; a denied one
// is a deny like any other. Like Do, it returns an error only when no
// receipt will exist for the call.
func (d *Dispatcher) Authorize(ctx context.Context, c Call) (res *Result, err error) {
	ctx, c, end, err := d.begin(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() { end(res, err) }()
	c, res, err = d.decided(ctx, c)
	if err != nil || !res.Decision.Allow {
		return res, err
	}
	out := &schemas.OutcomeEvent{
		Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(c.ReceiptID), ReceiptID: c.ReceiptID,
		Timestamp: d.stamp(), Outcome: schemas.OutcomeNotObserved, Reason: NotObservedReason,
		ContentHash: schemas.EmptyContentHash,
	}
	res.Outcome = out.Outcome
	// An allow whose outcome is not durable still stands (the decision
	// is): the ledger's timeout then ends its receipt incomplete.
	res.OutcomeDurable = d.writeOutcome(ctx, out, nil, res) == nil
	return res, nil
}

// Refuse records a call its edge refuses on a deny decision the kernel
// has already made (kernel.Identify: the caller's capability does not
// verify), so that a call turned away for its credentials still has its
// deny receipt (fail closed, never unrecorded). Nothing runs.
func (d *Dispatcher) Refuse(ctx context.Context, c Call, dec *kernel.Decision) (res *Result, err error) {
	if dec == nil || dec.Allow {
		return nil, errors.New("refuse: the decision is not a deny")
	}
	ctx, c, end, err := d.begin(ctx, c)
	if err != nil {
		return nil, err
	}
	defer func() { end(res, err) }()
	return d.decide(ctx, c, dec)
}

// begin readies c for its decision (prepared) and, when traced, starts
// its span, which end closes with the call's result.
func (d *Dispatcher) begin(ctx context.Context, c Call) (context.Context, Call, func(*Result, error), error) {
	c, err := prepared(c)
	if err != nil {
		return ctx, c, nil, err
	}
	if d.tracer == nil {
		return ctx, c, func(*Result, error) {}, nil
	}
	ctx, span := d.startCall(ctx, &c)
	return ctx, c, func(res *Result, err error) { endCall(span, res, err) }, nil
}

// prepared is c ready for its decision: canonical arguments (refused as
// ErrBadArguments before the kernel sees them) and its receipt and
// request ids.
func prepared(c Call) (Call, error) {
	args, err := canonicalArguments(c.Arguments)
	if err != nil {
		return c, err
	}
	c.Arguments = args
	if c.ReceiptID == "" {
		c.ReceiptID = uuid.Must(uuid.NewV7()).String()
	}
	if c.RequestID == "" {
		c.RequestID = c.ReceiptID // one request, one receipt: a chain can name either
	}
	return c, nil
}

// decide makes the call's decision event durable. An allowed call's
// proof of possession is settled (its one-time id claimed) beside that
// write, not before it: a proof costs no round of its own. If the claim
// fails, the Result carries the deny that replaces the allow.
func (d *Dispatcher) decide(ctx context.Context, c Call, dec *kernel.Decision) (*Result, error) {
	ev, raw, err := d.decisionEvent(c, dec)
	if err != nil {
		return nil, err
	}
	if !dec.Allow && dec.HasProof() {
		// Denied after its proof was checked (a budget, a guard): a
		// spent proof is refused first, as the order of the steps says,
		// and the deny names that. Denies only, so no call waits on it.
		if serr := dec.SettleProof(ctx); serr != nil {
			dec = d.kernel.RefuseProof(ctx, dec, serr)
			if ev, raw, err = d.decisionEvent(c, dec); err != nil {
				return nil, err
			}
		}
	}
	settled := make(chan error, 1)
	if dec.Allow && dec.HasProof() {
		go func() { settled <- dec.SettleProof(ctx) }()
	} else {
		settled <- nil // a bearer call, or a deny: nothing to settle beside the write
	}
	// A call cancelled before it was decided is not recorded (its
	// decision may be the cancel's own doing, a guard that could not
	// run). Once decided, the decision is written even if the call is
	// cancelled meanwhile (a task cancelled right after its send), so it
	// still ends in a receipt, its outcome "cancelled".
	wctx := ctx
	if ctx.Err() == nil {
		wctx = context.WithoutCancel(ctx)
	}
	werr := d.w.Write(wctx, ev.EventID, schemas.StreamEvent{Subject: schemas.SubjectDecision, Data: raw})
	serr := <-settled
	if werr != nil {
		return nil, notDurable("decision of "+c.ReceiptID, werr)
	}
	if serr != nil {
		return &Result{ReceiptID: c.ReceiptID, Decision: d.kernel.RefuseProof(ctx, dec, serr)}, nil
	}
	return &Result{ReceiptID: c.ReceiptID, Decision: dec}, nil
}

// refuseAllowed closes an allowed call that will not run (its proof was
// refused after the decision was written) with a refused outcome: the
// ledger signs it as a deny with the refusal's guard and reason.
func (d *Dispatcher) refuseAllowed(ctx context.Context, c Call, dec *kernel.Decision) error {
	out := &schemas.OutcomeEvent{
		Schema: schemas.OutcomeEventSchema, EventID: schemas.OutcomeEventID(c.ReceiptID), ReceiptID: c.ReceiptID,
		Timestamp: d.stamp(), Outcome: schemas.OutcomeRefused, Reason: dec.Reason, Guard: dec.Guard,
		ContentHash: schemas.EmptyContentHash,
	}
	raw, err := json.Marshal(out)
	if err == nil {
		err = d.w.Write(context.WithoutCancel(ctx), out.EventID, schemas.StreamEvent{Subject: schemas.SubjectOutcome, Data: raw})
	}
	if err != nil {
		// The allow decision is durable and no outcome is: the ledger's
		// timeout closes the call incomplete. Still nothing ran.
		return notDurable("refusal of "+c.ReceiptID, err)
	}
	return nil
}

// writeOutcome makes the outcome durable and, concurrently, runs finish
// (the edge's own record of the result), whose error goes to
// res.FinishErr. The outcome is recorded even if the caller has gone away.
func (d *Dispatcher) writeOutcome(ctx context.Context, out *schemas.OutcomeEvent, finish func(context.Context, *Result) error, res *Result) error {
	ctx = context.WithoutCancel(ctx)
	finished := make(chan error, 1)
	if finish != nil {
		go func() { finished <- d.finish(ctx, finish, res) }()
	} else {
		finished <- nil
	}
	raw, err := json.Marshal(out)
	if err == nil {
		err = d.w.Write(ctx, out.EventID, schemas.StreamEvent{Subject: schemas.SubjectOutcome, Data: raw})
	}
	res.FinishErr = <-finished
	return err
}

// run invokes the tool and returns the content hash of its output. A tool
// that panics fails its call (the outcome records it) instead of taking the
// replica down, and with it every replica that would retry the task.
func (d *Dispatcher) run(ctx context.Context, c Call, inv tools.Invocation, server *tools.Entry, res *Result) (contentHash string) {
	defer func() {
		if r := recover(); r != nil {
			res.ToolErr = fmt.Errorf("tool %s/%s panicked", c.ServerID, c.ToolName)
			res.Output, res.Chunks, contentHash = nil, nil, ""
		}
	}()
	switch {
	case server == nil || server.Server == nil:
		res.ToolErr = fmt.Errorf("%w: %s/%s has no in-process server", tools.ErrNoServer, c.ServerID, c.ToolName)
	case c.Stream:
		hashes := sha256.New()
		res.ToolErr = server.Server.InvokeStream(ctx, inv, func(ch tools.Chunk) error {
			canon, err := schemas.CanonicalizeJSON(ch.Data)
			if err != nil {
				return fmt.Errorf("chunk is not JSON: %w", err)
			}
			sum := sha256.Sum256(canon)
			hashes.Write(sum[:])
			res.Chunks = append(res.Chunks, tools.Chunk{Data: canon})
			if c.Emit != nil {
				return c.Emit(ch)
			}
			return nil
		})
		if len(res.Chunks) > 0 {
			// A streamed output hashes the concatenated chunk digests.
			contentHash = hex.EncodeToString(hashes.Sum(nil))
		}
	default:
		out, err := server.Server.Invoke(ctx, inv)
		res.ToolErr = err
		if err == nil && len(out) > 0 {
			canon, cerr := schemas.CanonicalizeJSON(out)
			if cerr != nil {
				res.ToolErr = fmt.Errorf("tool output is not JSON: %w", cerr)
			} else {
				res.Output = canon
				contentHash = schemas.SHA256Hex(canon)
			}
		}
	}
	return contentHash
}

func (d *Dispatcher) stamp() uint64 { return uint64(d.now().Unix()) }

// decisionEvent builds the call's decision event and its JSON.
func (d *Dispatcher) decisionEvent(c Call, dec *kernel.Decision) (*schemas.DecisionEvent, []byte, error) {
	meta := map[string]any{}
	for k, v := range c.Metadata {
		meta[k] = v
	}
	if a := dec.Attribution(); a != nil {
		meta["attribution"] = a
	}
	if len(dec.Lineage) > 1 {
		meta["lineage"] = dec.Lineage
	}
	if c.entry == nil {
		c.entry = dec.Tool
	}
	if c.entry == nil {
		c.entry, _ = d.registry.Tool(c.ServerID, c.ToolName)
	}
	if c.entry != nil && c.entry.Signed != nil {
		// The receipt names the manifest that governed the call; set after
		// the edge's keys, so an edge cannot name another.
		m := map[string]string{"hash": c.entry.Signed.ManifestHash}
		if c.entry.Signed.SignerKey != "" {
			m["signer_key"] = c.entry.Signed.SignerKey
		}
		meta["manifest"] = m
	}
	var rawMeta json.RawMessage
	if len(meta) > 0 {
		b, plain := appendCanonical(nil, meta)
		if !plain {
			var err error
			if b, err = schemas.Canonical(meta); err != nil {
				return nil, nil, fmt.Errorf("decision metadata: %w", err)
			}
		}
		rawMeta = b
	}
	// Canonical already (canonicalArguments); the policy may hash some values.
	params, err := d.kernel.Policy().Recorded(c.Arguments)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	evidence := dec.Evidence
	if len(evidence) > schemas.MaxEvidence {
		evidence = evidence[:schemas.MaxEvidence]
	}
	ev := &schemas.DecisionEvent{
		Schema: schemas.DecisionEventSchema, EventID: schemas.DecisionEventID(c.ReceiptID), ReceiptID: c.ReceiptID,
		Timestamp: d.stamp(), CapabilityID: dec.CapabilityID, ToolServer: c.ServerID, ToolName: c.ToolName,
		Parameters: params, Decision: dec.Verdict(), PolicyHash: dec.PolicyHash, Evidence: evidence, Metadata: rawMeta,
		TrustLevel: schemas.TrustMediated, TenantID: c.TenantID, RequestID: c.RequestID, TaskID: c.TaskID, EdgeID: d.edgeID, EdgeKey: d.edgeKey, EdgeCredentialID: d.edgeCredential,
		GovernedIntent: c.GovernedIntent, CapabilityLineage: dec.CapabilityLineage, TraceID: c.traceID,
	}
	if c.OutcomeWithin > 0 && ev.Decision.Verdict == schemas.VerdictAllow {
		ev.OutcomeDeadline = ev.Timestamp + min(uint64((c.OutcomeWithin+time.Second-1)/time.Second), schemas.MaxOutcomeDeadline)
	}
	if err := ev.Validate(); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	raw, err := fitEvent(ev)
	if err != nil {
		return nil, nil, err
	}
	return ev, raw, nil
}

// fitEvent keeps a decision event within the stream's message size. Each
// part is bounded, but a long delegation chain's lineage can tip the sum
// over; the lineage then goes without grants (a report on the receipt
// fails closed on them), and if that is not enough, without lineage. It
// returns the event's JSON, the bytes that are published.
func fitEvent(ev *schemas.DecisionEvent) ([]byte, error) {
	for step := 0; ; step++ {
		raw, err := json.Marshal(ev)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadArguments, err)
		}
		if len(raw) <= schemas.MaxEventBytes {
			return raw, nil
		}
		switch step {
		case 0:
			l := slices.Clone(ev.CapabilityLineage) // the kernel caches the records: never change them
			for i := range l {
				l[i].Grants, l[i].GrantsOmitted = nil, true
			}
			ev.CapabilityLineage = l
		case 1:
			ev.CapabilityLineage = nil
		default:
			return nil, fmt.Errorf("%w: the decision event would be %d bytes, over %d", ErrBadArguments, len(raw), schemas.MaxEventBytes)
		}
	}
}

// CheckArguments reports whether args are arguments the dispatcher takes
// (see canonicalArguments), so that an edge can refuse a call before it
// stores anything for it. The error wraps ErrBadArguments.
func CheckArguments(args json.RawMessage) error {
	_, err := canonicalArguments(args)
	return err
}

// canonicalArguments checks a call's arguments (a JSON object of at most
// MaxParametersBytes) and returns their RFC 8785 form, or ErrBadArguments.
func canonicalArguments(args json.RawMessage) (json.RawMessage, error) {
	if len(args) > schemas.MaxParametersBytes {
		return nil, fmt.Errorf("%w of at most %d bytes", ErrBadArguments, schemas.MaxParametersBytes)
	}
	if t := bytes.TrimLeft(args, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, ErrBadArguments
	}
	// Strict and canonical before the kernel decides: arguments the strict
	// reader or JCS refuses (a repeated or case-variant member, nesting
	// past strictjson.MaxDepth, a lone surrogate, a number out of range)
	// must be turned away before any guard runs or budget is charged, or
	// the call would have a decision and no readable receipt. The canonical
	// bytes are what the decision event records and the tool gets.
	if err := strictjson.Valid(args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadArguments, err)
	}
	canon, err := schemas.CanonicalizeJSON(args)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	if err := exactNumbers(args); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadArguments, err)
	}
	return canon, nil
}

// exactNumbers refuses a number that RFC 8785 would change in value: JCS
// writes a number as the shortest decimal that reads back as the same
// IEEE double, and the tool gets the canonical arguments, so an id of
// 9007199254740993 would reach it as ...992, another record. 1.10 or 1e2
// keep their value (1.1, 100) and pass. Such a value must travel as a
// string. It runs after canonicalization, so every number is in range.
func exactNumbers(args json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n, ok := tok.(json.Number)
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return fmt.Errorf("number %s: %v", schemas.TruncateText(string(n)), err)
		}
		sent, ok1 := new(big.Rat).SetString(string(n))
		kept, ok2 := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
		if !ok1 || !ok2 || sent.Cmp(kept) != 0 {
			return fmt.Errorf("number %s cannot be carried exactly (it would become %s): send it as a string",
				schemas.TruncateText(string(n)), strconv.FormatFloat(f, 'g', -1, 64))
		}
	}
}
