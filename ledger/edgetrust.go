package ledger

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// EdgeTrust is how the ledger decides that a certified edge wrote a
// message: the issuers whose edge credentials it honours, and when a
// credential was revoked.
type EdgeTrust struct {
	// Issuers are the hex Ed25519 keys whose chio.edge_credential.v1 it
	// honours (the capability issuers).
	Issuers []string
	// RevokedAt reports when a credential id was revoked (unix seconds),
	// and false when it is not revoked. Nil: no revocations.
	RevokedAt func(id string) (uint64, bool)
}

// WithEdgeTrust makes the ledger fold only messages an edge signed with a
// key whose credential one of the trusted issuers signed, valid and not
// revoked when the stream stored the message; a decision must name that
// edge (edge id, key, credential id), and its receipt names it in
// metadata.edge. Every other message is quarantined: published to
// CHIO_QUARANTINE with the reason, counted in
// chio_ledger_events_quarantined_total and logged, and never a receipt.
// Timeout events are the ledger's own (only its role may publish them)
// and need no edge signature.
func WithEdgeTrust(t EdgeTrust) Option { return func(c *config) { c.edgeTrust = &t } }

// Quarantine names.
const (
	// QuarantineStream holds the messages the ledger refused to fold, with
	// why (HeaderQuarantineReason) and where they were
	// (HeaderQuarantineSeq).
	QuarantineStream   = "CHIO_QUARANTINE"
	QuarantineSubjects = "chio.quarantine.>"
	quarantineSubject  = "chio.quarantine.events"

	HeaderQuarantineReason = "Chio-Quarantine-Reason"
	HeaderQuarantineSeq    = "Chio-Stream-Seq"
	headerQuarantineFrom   = "Chio-Subject"
)

// QuarantineStreamConfig is the configuration of QuarantineStream (the
// ledger owns it). It keeps the newest quarantineMaxMsgs: a count, not a
// byte size, because JetStream reserves a byte limit's storage up front.
func QuarantineStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: QuarantineStream, Description: "Chio stream messages the ledger refused to fold, with the reason",
		Subjects: []string{QuarantineSubjects}, Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy,
		Replicas: max(replicas, 1), Duplicates: schemas.DuplicateWindow, Discard: jetstream.DiscardOld,
		MaxMsgs: quarantineMaxMsgs, MaxMsgSize: schemas.MaxEnvelopeBytes + 8<<10, Compression: schemas.StreamCompression,
	}
}

// quarantineMaxMsgs bounds the quarantine: the oldest go first.
const quarantineMaxMsgs = 1_000_000

// edgeCheck is the ledger's edge trust: the verifier and the count of
// what it refused.
type edgeCheck struct {
	v       *schemas.EdgeVerifier
	refused *prometheus.CounterVec
}

func newEdgeCheck(t *EdgeTrust, reg prometheus.Registerer) *edgeCheck {
	c := &edgeCheck{v: schemas.NewEdgeVerifier(t.Issuers, t.RevokedAt),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "chio_ledger_events_quarantined_total",
			Help: "Stream messages the ledger refused to fold (no valid signature of a certified edge), by reason."}, []string{"reason"})}
	if reg != nil {
		reg.MustRegister(c.refused)
	}
	return c
}

// check returns the credential that signed e, or why e is refused.
func (c *edgeCheck) check(e *event) (*schemas.EdgeCredential, error) {
	if e.subject == schemas.SubjectTimeout {
		return nil, nil // the ledger's own
	}
	return c.v.Check(e.subject, e.data, e.edgeCred, e.edgeSig, e.stored)
}

// screen marks the events no certified edge signed as refused (they fold
// to nothing) and the others with their signer, and returns the refused
// ones with why. Without edge trust it marks nothing.
func (l *Ledger) screen(events []event) (refused []refusedEvent) {
	if l.edge == nil {
		return nil
	}
	// Each message is one signature check: on every core, as decoding is.
	errs := make([]error, len(events))
	_ = parallel(len(events), func(i int) error {
		e := &events[i]
		cred, err := l.edge.check(e)
		if err != nil {
			e.refused, errs[i] = true, err
			return nil
		}
		e.signer, e.checkEdge = cred, cred != nil
		return nil
	})
	for i, err := range errs {
		if err != nil {
			refused = append(refused, refusedEvent{events[i], err})
		}
	}
	return refused
}

type refusedEvent struct {
	event
	why error
}

// quarantine publishes the refused messages to QuarantineStream (each
// once: its message id is its stream sequence), counts and logs them.
func (l *Ledger) quarantine(ctx context.Context, refused []refusedEvent) error {
	for _, r := range refused {
		l.edge.refused.WithLabelValues(schemas.EdgeReason(r.why)).Inc()
		l.log.Warn("quarantined a message no certified edge signed: no receipt", "stream_seq", r.seq, "subject", r.subject, "reason", r.why)
		msg := &nats.Msg{Subject: quarantineSubject, Data: r.data, Header: nats.Header{}}
		msg.Header.Set(HeaderQuarantineReason, r.why.Error())
		msg.Header.Set(HeaderQuarantineSeq, strconv.FormatUint(r.seq, 10))
		msg.Header.Set(headerQuarantineFrom, r.subject)
		if r.edgeCred != "" {
			msg.Header.Set(schemas.HeaderEdgeCredential, r.edgeCred)
		}
		if _, err := l.js.PublishMsg(ctx, msg, jetstream.WithMsgID("q-"+strconv.FormatUint(r.seq, 10))); err != nil {
			return fmt.Errorf("ledger: quarantine stream sequence %d: %w", r.seq, err)
		}
	}
	return nil
}

// claimsSigner reports whether a decision names the edge that signed it.
func claimsSigner(d *schemas.DecisionEvent, c *schemas.EdgeCredential) bool {
	return d.EdgeID == c.EdgeID && d.EdgeKey == c.PublicKey && d.EdgeCredentialID == c.ID
}

// withEdge sets the event's edge signature headers from its message.
func withEdge(e event, h nats.Header) event {
	if h != nil {
		e.edgeCred, e.edgeSig = h.Get(schemas.HeaderEdgeCredential), h.Get(schemas.HeaderEdgeSignature)
	}
	return e
}

// keepCredentials adds to tx each credential that signed a message of
// msgs and that this process has not stored yet, and returns their ids
// (marked kept once tx commits). A receipt names its edge's credential by
// id; the store keeps the credential itself for evidence packages.
func (l *Ledger) keepCredentials(tx *logstore.Txn, msgs []event) ([]string, error) {
	var kept []string
	for i := range msgs {
		c := msgs[i].signer
		if c == nil || slices.Contains(kept, c.ID) {
			continue
		}
		if _, ok := l.credsKept.Load(c.ID); ok {
			continue
		}
		raw, err := schemas.Canonical(c)
		if err != nil {
			return nil, fmt.Errorf("ledger: keep edge credential %s: %w", c.ID, err)
		}
		tx.PutEdgeCredential(c.ID, raw)
		kept = append(kept, c.ID)
	}
	return kept, nil
}
