package schemas

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// # Event envelopes: group commit on CHIO_EVENTS
//
// On a single node with SyncAlways, JetStream's file store fsyncs every
// stored message on its own, one after another per stream; concurrent
// publishers share nothing. An edge therefore writes events through one
// coalescing writer per process: while one write is being synced, the
// events other calls queue wait, and the next write carries all of them
// as one message, an envelope. One fsync (one replicated proposal in a
// cluster) then makes many calls' decisions durable, and at one client
// nothing waits longer than before. A lone event is still written as a
// message of its own on its own subject, so a quiet edge writes exactly
// the layout written before envelopes existed; every consumer reads both.
//
// An envelope is a message on SubjectEnvelope whose body is one line per
// event, in order: the event's subject (chio.events.decision, …), one
// space, the event's JSON, a newline. Compact JSON never holds a raw
// newline, so a consumer slices the body without a JSON pass of its own
// and decodes each event exactly once. HeaderEventKinds lists the events'
// subjects for consumers that route on headers alone.
//
// Order is the stream's order, then the line's: folding a stream that
// holds envelopes gives the same receipts, in the same order, on every
// replay. Deduplication is by event id, never by message: the ledger
// marks every event id in the batch that appends its receipt, so an event
// that reaches the stream twice (in two envelopes, or once alone and once
// in an envelope) still ends in one receipt. An envelope's Nats-Msg-Id is
// a digest of its body, so a retried publish of the same envelope is also
// dropped by JetStream within the stream's duplicate window.

const (
	// SubjectEnvelope is the subject of a message carrying several events.
	SubjectEnvelope = "chio.events.envelope"
	// HeaderEventKinds lists the subjects of an envelope's events, in
	// order, comma-separated.
	HeaderEventKinds = "Chio-Events"
	// MaxEnvelopeBytes bounds one envelope message, body and headers (the
	// events stream accepts messages up to this size); EnvelopeOverhead
	// of it is kept for the headers, so an envelope's body and its kinds
	// header together stay within MaxEnvelopeBytes - EnvelopeOverhead.
	// Any single event (at most MaxEventBytes) fits in one.
	MaxEnvelopeBytes = 512 << 10
	// EnvelopeOverhead is the room kept in an envelope message for the
	// headers other than HeaderEventKinds (message id, and what the
	// client adds).
	EnvelopeOverhead = 1 << 10
	// MaxEnvelopeEvents bounds the events of one envelope.
	MaxEnvelopeEvents = 1024
)

// StreamEvent is one event as the events stream carries it: its subject
// (what kind of event it is) and its JSON.
type StreamEvent struct {
	Subject string
	Data    []byte
}

// ErrBadEnvelope means an envelope's body does not follow the framing.
var ErrBadEnvelope = errors.New("malformed event envelope")

// eventSubject reports whether s is the subject of one event kind.
func eventSubject(s string) bool {
	return s == SubjectDecision || s == SubjectOutcome || s == SubjectTimeout
}

// EnvelopeSize is what events add to an envelope message: their lines in
// the body and their entries in the HeaderEventKinds header.
func EnvelopeSize(events []StreamEvent) int {
	n := 0
	for _, e := range events {
		n += len(e.Subject) + 1 + len(e.Data) + 1 // body line
		n += len(e.Subject) + 1                   // kinds header entry
	}
	return n
}

// PackEvents encodes events as an envelope body, in order. Each event's
// subject must name an event kind and its data must hold no newline
// (compact JSON never does).
func PackEvents(events []StreamEvent) ([]byte, error) {
	if len(events) == 0 || len(events) > MaxEnvelopeEvents {
		return nil, fmt.Errorf("%w: %d events, want 1..%d", ErrBadEnvelope, len(events), MaxEnvelopeEvents)
	}
	body := make([]byte, 0, EnvelopeSize(events))
	for i, e := range events {
		if !eventSubject(e.Subject) {
			return nil, fmt.Errorf("%w: event %d: subject %q is no event kind", ErrBadEnvelope, i, e.Subject)
		}
		if len(e.Data) == 0 || bytes.IndexByte(e.Data, '\n') >= 0 {
			return nil, fmt.Errorf("%w: event %d: empty or holds a newline", ErrBadEnvelope, i)
		}
		body = append(body, e.Subject...)
		body = append(body, ' ')
		body = append(body, e.Data...)
		body = append(body, '\n')
	}
	if n := EnvelopeSize(events); n > MaxEnvelopeBytes-EnvelopeOverhead {
		return nil, fmt.Errorf("%w: %d bytes with its kinds header, over %d", ErrBadEnvelope, n, MaxEnvelopeBytes-EnvelopeOverhead)
	}
	return body, nil
}

// EnvelopeKinds is the HeaderEventKinds value of an envelope of events.
func EnvelopeKinds(events []StreamEvent) string {
	var b []byte
	for i, e := range events {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.Subject...)
	}
	return string(b)
}

// EventCount is how many events a message of the events stream carries,
// from its subject and HeaderEventKinds alone (no body read): a consumer
// bounds its batches in events, not messages.
func EventCount(subject, kinds string) int {
	if subject != SubjectEnvelope || kinds == "" {
		return 1
	}
	return strings.Count(kinds, ",") + 1
}

// EnvelopeMsgID is the Nats-Msg-Id of an envelope body: a digest of it,
// so that the same envelope published again is a duplicate.
func EnvelopeMsgID(body []byte) string {
	sum := sha256.Sum256(body)
	return "envelope." + hex.EncodeToString(sum[:16])
}

// UnpackEvents returns the events one message of the events stream
// carries: the message itself when its subject names an event kind, or
// the events of an envelope, in order. The events' Data alias data. Any
// other subject carries no events (nil, nil), so a consumer skips it the
// same way on every replay; a malformed envelope is ErrBadEnvelope and
// carries none either.
func UnpackEvents(subject string, data []byte) ([]StreamEvent, error) {
	if eventSubject(subject) {
		return []StreamEvent{{Subject: subject, Data: data}}, nil
	}
	if subject != SubjectEnvelope {
		return nil, nil
	}
	n := bytes.Count(data, []byte{'\n'})
	if n == 0 || n > MaxEnvelopeEvents || data[len(data)-1] != '\n' {
		return nil, fmt.Errorf("%w: want 1..%d newline-terminated lines", ErrBadEnvelope, MaxEnvelopeEvents)
	}
	out := make([]StreamEvent, 0, n)
	for len(data) > 0 {
		line := data[:bytes.IndexByte(data, '\n')]
		data = data[len(line)+1:]
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			return nil, fmt.Errorf("%w: line %d has no subject", ErrBadEnvelope, len(out)+1)
		}
		subj := string(line[:sp])
		if !eventSubject(subj) || sp+1 == len(line) {
			return nil, fmt.Errorf("%w: line %d: subject %s", ErrBadEnvelope, len(out)+1, strconv.Quote(subj))
		}
		out = append(out, StreamEvent{Subject: subj, Data: line[sp+1:]})
	}
	return out, nil
}

// # Who reads envelopes: the gate on writing them
//
// A consumer from a release before envelopes skips SubjectEnvelope as an
// unknown subject and moves past it, so the calls an envelope carries
// would never get receipts. An edge therefore writes envelopes only while
// every durable consumer of the events stream declares that it reads
// them, in its JetStream consumer metadata: MetadataReads holding
// ReadsEnvelopes. A consumer that declares nothing is taken to be older
// and gets every event as a message of its own, the layout every release
// reads. Ephemeral consumers (ordered replays, tools, a standby following
// the stream) hold no position across restarts and do not count.

const (
	// MetadataReads is the consumer metadata key listing, comma-separated,
	// the event layouts a consumer reads beyond one event per message.
	MetadataReads = "chio.reads"
	// ReadsEnvelopes is the MetadataReads entry of a consumer that reads
	// envelopes (SubjectEnvelope).
	ReadsEnvelopes = "envelope/1"
)

// ReaderMetadata is the consumer metadata a consumer of the events stream
// from this release declares: it reads envelopes.
func ReaderMetadata() map[string]string { return map[string]string{MetadataReads: ReadsEnvelopes} }

// ReadsEnvelopeLayout reports whether a consumer's metadata declares that
// it reads envelopes.
func ReadsEnvelopeLayout(metadata map[string]string) bool {
	for _, v := range strings.Split(metadata[MetadataReads], ",") {
		if strings.TrimSpace(v) == ReadsEnvelopes {
			return true
		}
	}
	return false
}
