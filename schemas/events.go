package schemas

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"
)

// Schema identifiers carried in each event's "schema" field.
const (
	DecisionEventSchema = "chio.event.decision.v1"
	OutcomeEventSchema  = "chio.event.outcome.v1"
	TimeoutEventSchema  = "chio.event.timeout.v1"
)

// DecisionEvent is published by an edge after the kernel decides and before
// any tool runs; the PubAck must arrive before the tool is invoked. An allow
// decision is completed by an OutcomeEvent or, if none comes, by a
// TimeoutEvent; a deny decision is final on its own.
type DecisionEvent struct {
	Schema       string          `json:"schema"`
	EventID      string          `json:"event_id"`
	ReceiptID    string          `json:"receipt_id"`
	Timestamp    uint64          `json:"timestamp"`
	CapabilityID string          `json:"capability_id"`
	ToolServer   string          `json:"tool_server"`
	ToolName     string          `json:"tool_name"`
	Parameters   json.RawMessage `json:"parameters"`
	Decision     Decision        `json:"decision"`
	PolicyHash   string          `json:"policy_hash"`
	Evidence     []GuardEvidence `json:"evidence,omitempty"`
	Metadata     json.RawMessage `json:"metadata,omitempty"`
	TrustLevel   TrustLevel      `json:"trust_level,omitempty"`
	TenantID     string          `json:"tenant_id,omitempty"`
	RequestID    string          `json:"request_id,omitempty"`
	TaskID       string          `json:"task_id,omitempty"`
	EdgeID       string          `json:"edge_id,omitempty"`
	// EdgeKey and EdgeCredentialID name the edge key that signed the
	// decision and its credential (schemas.EdgeCredential); a ledger that
	// checks edge signatures folds the decision only if they are the
	// signer's, and names them in the receipt (metadata.edge).
	EdgeKey          string `json:"edge_key,omitempty"`
	EdgeCredentialID string `json:"edge_credential_id,omitempty"`
	// GovernedIntent is the caller's declared intent, if any; the ledger
	// signs it into metadata.governed_transaction.
	GovernedIntent *GovernedIntent `json:"governed_intent,omitempty"`
	// CapabilityLineage is the presented token's delegation chain as the
	// kernel verified it, root first; empty when no token verified.
	CapabilityLineage []CapabilityLineage `json:"capability_lineage,omitempty"`
	// TraceID is the OpenTelemetry trace id of the call (32 lowercase
	// hex), present only when the edge traced it; the ledger copies it
	// into the receipt's metadata as "trace_id", so a receipt leads to
	// its trace.
	TraceID string `json:"trace_id,omitempty"`
	// OutcomeDeadline, set only on an allow decision whose call may
	// rightly wait longer than the ledger's incomplete-after (a person
	// answering a permission request), is the unix second until which
	// the call is still expected to end: the ledger does not time it out
	// before then. At most MaxOutcomeDeadline after Timestamp; absent
	// (0), the ledger's incomplete-after alone applies.
	OutcomeDeadline uint64 `json:"outcome_deadline,omitempty"`
}

// MaxOutcomeDeadline bounds a decision's OutcomeDeadline after its
// timestamp: a call cannot keep its receipt open longer than a day.
const MaxOutcomeDeadline = 24 * 60 * 60

// Outcome of a tool call that was allowed to run.
type Outcome string

// Outcomes an edge reports.
const (
	OutcomeCompleted Outcome = "completed"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeRefused: the edge refused the allowed call before its tool
	// ran (its proof of possession turned out to be spent, which is
	// settled beside the decision's write). The receipt is a deny by
	// the outcome's Guard.
	OutcomeRefused Outcome = "refused"
	// OutcomeNotObserved: the call was allowed, and something else
	// carried it out (a gateway that asked Chio to decide: forward
	// authentication, Envoy's ext_authz, an AuthZEN client), which does
	// not report back. The receipt is an allow whose metadata says
	// "outcome": "not_observed" and whose content_hash is
	// EmptyContentHash, never an invented result.
	OutcomeNotObserved Outcome = "not_observed"
)

// MetadataOutcomeKey is the receipt metadata key the ledger sets on the
// receipt of a not_observed call.
const MetadataOutcomeKey = "outcome"

// OutcomeEvent is published by an edge after an allowed tool call ends.
type OutcomeEvent struct {
	Schema      string  `json:"schema"`
	EventID     string  `json:"event_id"`
	ReceiptID   string  `json:"receipt_id"`
	Timestamp   uint64  `json:"timestamp"`
	Outcome     Outcome `json:"outcome"`
	ContentHash string  `json:"content_hash"`
	Reason      string  `json:"reason,omitempty"`
	// Guard names the check that refused a refused call.
	Guard    string          `json:"guard,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// TimeoutEvent is published by the ledger when an allow decision has had no
// outcome for its configured time. It is an event in the stream, so the
// incomplete receipt is decided by stream order, never by a wall clock, and a
// replay reproduces it. Its timestamp is the decision's plus the timeout, so
// every publication of it carries the same bytes.
type TimeoutEvent struct {
	Schema    string `json:"schema"`
	EventID   string `json:"event_id"`
	ReceiptID string `json:"receipt_id"`
	Timestamp uint64 `json:"timestamp"`
	Reason    string `json:"reason"`
}

// Deterministic event ids: a retried publish of the same event carries the
// same Nats-Msg-Id, so the stream's duplicate window and the ledger's exact
// dedup index both see it as one event.
func DecisionEventID(receiptID string) string { return receiptID + ".decision" }

// OutcomeEventID is the event id of a receipt's outcome event.
func OutcomeEventID(receiptID string) string { return receiptID + ".outcome" }

// TimeoutEventID is the event id of a receipt's timeout event.
func TimeoutEventID(receiptID string) string { return receiptID + ".timeout" }

// Size bounds. They apply to canonical (RFC 8785) sizes, because escaping
// can make JSON text six times longer, and together they keep every receipt
// under MaxEncodedReceipt, the C2SP entry-bundle limit: an event that
// validates always folds into a receipt that fits in the log
// (TestLargestEventsFitInALeaf). The worst case is parameters + decision
// metadata + outcome metadata + the decision's other text + an outcome
// reason + the receipt's fixed fields: 32 + 8 + 8 + 8 + 6 + 1 KiB < 64 KiB.
const (
	// MaxIDLength bounds receipt and event ids, which become index keys.
	MaxIDLength = 128
	// MaxParametersBytes bounds a call's canonical parameters.
	MaxParametersBytes = 32 << 10
	// MaxMetadataBytes bounds the canonical metadata of one event.
	MaxMetadataBytes = 8 << 10
	// MaxDecisionTextBytes bounds the canonical JSON of a decision's other
	// caller-supplied fields: names, decision, policy hash, evidence, tenant.
	MaxDecisionTextBytes = 8 << 10
	// MaxTextBytes bounds one reason, guard name, evidence detail or tenant id.
	MaxTextBytes = 1 << 10
	// MaxEvidence bounds the guard evidence list.
	MaxEvidence = 16
	// MaxEventBytes bounds one event message on the stream.
	MaxEventBytes = 64 << 10
)

// ValidID reports whether s is an acceptable receipt id: 1–128 characters
// of [A-Za-z0-9._:-], starting with a letter or digit, so ids are safe in
// URL paths and index keys.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if !alnum && (i == 0 || (c != '.' && c != '_' && c != ':' && c != '-')) {
			return false
		}
	}
	return true
}

func checkEventHeader(schema, want, eventID, receiptID, wantEventID string) error {
	if schema != want {
		return fmt.Errorf("schema is %q, want %q", schema, want)
	}
	if !ValidID(receiptID) {
		return fmt.Errorf("receipt_id %q is not a valid id", abbreviate(receiptID))
	}
	if eventID != wantEventID {
		return fmt.Errorf("event_id is %q, want %q", abbreviate(eventID), wantEventID)
	}
	return nil
}

// Validate checks a decision event before it is published or folded.
func (e *DecisionEvent) Validate() error {
	if err := checkEventHeader(e.Schema, DecisionEventSchema, e.EventID, e.ReceiptID, DecisionEventID(e.ReceiptID)); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	switch {
	case e.Timestamp == 0:
		return errors.New("decision event: timestamp is missing")
	case !ValidName(e.CapabilityID), !ValidName(e.ToolServer), !ValidName(e.ToolName):
		return errors.New("decision event: capability_id, tool_server and tool_name must be non-empty, at most 256 bytes, without control characters")
	case len(e.Parameters) == 0:
		return errors.New("decision event: parameters are missing")
	case len(e.Parameters) > MaxEventBytes:
		return fmt.Errorf("decision event: parameters exceed %d bytes", MaxEventBytes)
	case len(e.Evidence) > MaxEvidence:
		return fmt.Errorf("decision event: more than %d evidence entries", MaxEvidence)
	case len(e.Decision.Reason) > MaxTextBytes || len(e.Decision.Guard) > MaxTextBytes || len(e.PolicyHash) > MaxTextBytes:
		return fmt.Errorf("decision event: reason, guard and policy_hash are limited to %d bytes", MaxTextBytes)
	case e.PolicyHash == "":
		return errors.New("decision event: policy_hash is empty")
	case e.Decision.Verdict != VerdictAllow && e.Decision.Verdict != VerdictDeny:
		return fmt.Errorf("decision event: verdict %q (an edge decides allow or deny)", e.Decision.Verdict)
	}
	if err := e.Decision.Validate(); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	for i, ev := range e.Evidence {
		if ev.GuardName == "" || len(ev.GuardName) > MaxTextBytes || len(ev.Details) > MaxTextBytes {
			return fmt.Errorf("decision event: evidence[%d] needs a guard_name; names and details are limited to %d bytes", i, MaxTextBytes)
		}
	}
	if len(e.TenantID) > MaxTextBytes {
		return fmt.Errorf("decision event: tenant_id exceeds %d bytes", MaxTextBytes)
	}
	if err := checkMetadata(e.Metadata); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	if err := checkCanonical("parameters", e.Parameters, MaxParametersBytes); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	if err := e.checkMetadataAndIntent(); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	if len(e.RequestID) > 256 || len(e.TaskID) > 256 || len(e.EdgeID) > 256 {
		return errors.New("decision event: request_id, task_id and edge_id are limited to 256 bytes")
	}
	if e.TraceID != "" && !ValidTraceID(e.TraceID) {
		return fmt.Errorf("decision event: trace_id %q is not 32 lowercase hex digits", abbreviate(e.TraceID))
	}
	if e.OutcomeDeadline != 0 {
		switch {
		case e.Decision.Verdict != VerdictAllow:
			return errors.New("decision event: outcome_deadline is for an allow decision (a deny is final)")
		case e.OutcomeDeadline <= e.Timestamp || e.OutcomeDeadline-e.Timestamp > MaxOutcomeDeadline:
			return fmt.Errorf("decision event: outcome_deadline %d must be after timestamp %d and at most %d s after it", e.OutcomeDeadline, e.Timestamp, MaxOutcomeDeadline)
		}
	}
	if len(e.CapabilityLineage) > 0 {
		if err := checkLineage(e.CapabilityLineage); err != nil {
			return fmt.Errorf("decision event: %w", err)
		}
	}
	if err := e.checkText(); err != nil {
		return fmt.Errorf("decision event: %w", err)
	}
	switch e.TrustLevel {
	case "", TrustMediated, TrustVerified, TrustAdvisory:
	default:
		return fmt.Errorf("decision event: unknown trust_level %q", e.TrustLevel)
	}
	return nil
}

// Validate checks an outcome event.
func (e *OutcomeEvent) Validate() error {
	if err := checkEventHeader(e.Schema, OutcomeEventSchema, e.EventID, e.ReceiptID, OutcomeEventID(e.ReceiptID)); err != nil {
		return fmt.Errorf("outcome event: %w", err)
	}
	switch {
	case e.Timestamp == 0:
		return errors.New("outcome event: timestamp is missing")
	case !isSHA256Hex(e.ContentHash):
		return errors.New("outcome event: content_hash is not 64 lowercase hex")
	case len(e.Reason) > MaxTextBytes:
		return fmt.Errorf("outcome event: reason exceeds %d bytes", MaxTextBytes)
	}
	switch e.Outcome {
	case OutcomeCompleted:
	case OutcomeFailed, OutcomeCancelled:
		if e.Reason == "" {
			return fmt.Errorf("outcome event: %s needs a reason", e.Outcome)
		}
	case OutcomeRefused:
		if e.Reason == "" || e.Guard == "" || len(e.Guard) > MaxTextBytes {
			return fmt.Errorf("outcome event: %s needs a reason and a guard", e.Outcome)
		}
		if e.ContentHash != EmptyContentHash {
			return errors.New("outcome event: a refused call has no output")
		}
	case OutcomeNotObserved:
		if e.Reason == "" {
			return fmt.Errorf("outcome event: %s needs a reason", e.Outcome)
		}
		if e.ContentHash != EmptyContentHash {
			return errors.New("outcome event: a not_observed call has no output it saw")
		}
	default:
		return fmt.Errorf("outcome event: unknown outcome %q", e.Outcome)
	}
	if err := checkMetadata(e.Metadata); err != nil {
		return fmt.Errorf("outcome event: %w", err)
	}
	if err := checkCanonical("metadata", e.Metadata, MaxMetadataBytes); err != nil {
		return fmt.Errorf("outcome event: %w", err)
	}
	return nil
}

// Validate checks a timeout event.
func (e *TimeoutEvent) Validate() error {
	if err := checkEventHeader(e.Schema, TimeoutEventSchema, e.EventID, e.ReceiptID, TimeoutEventID(e.ReceiptID)); err != nil {
		return fmt.Errorf("timeout event: %w", err)
	}
	if e.Timestamp == 0 || e.Reason == "" || len(e.Reason) > MaxTextBytes {
		return errors.New("timeout event: timestamp and a reason of at most 1024 bytes are required")
	}
	return nil
}

// checkText bounds the canonical size of the decision's caller-supplied
// text. Most events are far below the bound, which their raw size already
// proves (escaping grows text at most sixfold); only larger ones are
// canonicalized to measure.
func (e *DecisionEvent) checkText() error {
	raw := len(e.CapabilityID) + len(e.ToolServer) + len(e.ToolName) + len(e.PolicyHash) + len(e.TenantID) +
		len(e.Decision.Reason) + len(e.Decision.Guard)
	for _, ev := range e.Evidence {
		raw += len(ev.GuardName) + len(ev.Details) + 64
	}
	if 6*raw+512 <= MaxDecisionTextBytes {
		return nil
	}
	c, err := Canonical(struct {
		A, B, C, D, E string
		F             Decision
		G             []GuardEvidence
	}{e.CapabilityID, e.ToolServer, e.ToolName, e.PolicyHash, e.TenantID, e.Decision, e.Evidence})
	if err != nil {
		return err
	}
	if len(c) > MaxDecisionTextBytes {
		return fmt.Errorf("names, decision, policy hash, evidence and tenant exceed %d bytes in canonical form", MaxDecisionTextBytes)
	}
	return nil
}

// checkMetadataAndIntent bounds the metadata and the intent together: both
// end up in the receipt's metadata, so they share MaxMetadataBytes. The
// intent is checked for shape and size only; whether it fits the call is
// the kernel's decision, and a deny for a bad intent still records it.
func (e *DecisionEvent) checkMetadataAndIntent() error {
	budget := MaxMetadataBytes
	if g := e.GovernedIntent; g != nil {
		c, err := Canonical(g)
		if err != nil {
			return fmt.Errorf("governed_intent: %w", err)
		}
		if len(c) > MaxIntentBytes {
			return fmt.Errorf("governed_intent exceeds %d bytes in canonical form", MaxIntentBytes)
		}
		if len(g.Context) > 0 {
			if err := checkMetadata(g.Context); err != nil {
				return fmt.Errorf("governed_intent.context: %w", err)
			}
		}
		budget -= len(c)
	}
	return checkCanonical("metadata", e.Metadata, budget)
}

// checkCanonical requires JSON the JCS library accepts (no duplicate keys,
// numbers within IEEE double range, no lone surrogates) with a canonical
// size of at most max: anything else could never be signed.
func checkCanonical(what string, raw json.RawMessage, max int) error {
	if len(raw) == 0 {
		return nil
	}
	c, err := canonicalize(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if len(c) > max {
		return fmt.Errorf("%s exceed %d bytes in canonical form", what, max)
	}
	return nil
}

// ValidTraceID reports whether s is a W3C trace id as a decision event
// carries it: 32 lowercase hex digits, not all zero (the invalid id).
func ValidTraceID(s string) bool {
	if len(s) != 32 || s == "00000000000000000000000000000000" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidName reports whether s is a non-empty name of at most 256 bytes of
// UTF-8 without control characters: capability ids, tool servers and tool
// names become index keys and subject tokens.
func ValidName(s string) bool {
	if s == "" || len(s) > 256 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// checkMetadata requires metadata, when present, to be a JSON object.
func checkMetadata(m json.RawMessage) error {
	if len(m) == 0 {
		return nil
	}
	if len(m) > MaxEventBytes {
		return fmt.Errorf("metadata exceeds %d bytes", MaxEventBytes)
	}
	t := bytes.TrimSpace(m)
	if len(t) == 0 || t[0] != '{' {
		return errors.New("metadata must be a JSON object")
	}
	return nil
}

// DecodeStrict decodes one JSON value into v, refusing unknown fields and
// trailing data.
func DecodeStrict(raw []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// Token, not More: More reports false before a stray '}' or ']'.
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// TruncateText shortens s to at most MaxTextBytes on a UTF-8 boundary,
// marking the cut: reasons and details must fit a decision event.
func TruncateText(s string) string {
	if len(s) <= MaxTextBytes {
		return s
	}
	cut := MaxTextBytes - len("…")
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + "…"
}
