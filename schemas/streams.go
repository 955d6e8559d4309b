package schemas

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// JetStream names shared by every component.
const (
	// EventsStream holds decision, outcome and timeout events: the source of
	// truth the log and every projection are rebuilt from.
	EventsStream = "CHIO_EVENTS"
	// EventsSubjects is the subject filter of EventsStream.
	EventsSubjects = "chio.events.>"
	// ReceiptsStream holds every signed receipt after the ledger committed it.
	ReceiptsStream = "CHIO_RECEIPTS"
	// ReceiptsSubjects is the subject filter of ReceiptsStream.
	ReceiptsSubjects = "chio.receipts.>"

	SubjectDecision = "chio.events.decision"
	SubjectOutcome  = "chio.events.outcome"
	SubjectTimeout  = "chio.events.timeout"

	// DuplicateWindow is the publish dedup window of both streams.
	DuplicateWindow = 2 * time.Minute
)

// ReceiptSubject is the subject a signed receipt is published on:
// chio.receipts.<tool_server>, with characters that NATS reserves in a
// subject token (space, '.', '*', '>') replaced by '_'.
func ReceiptSubject(toolServer string) string {
	token := strings.Map(func(r rune) rune {
		switch {
		case r == '.' || r == '*' || r == '>' || r <= ' ' || r == 0x7f:
			return '_'
		}
		return r
	}, toolServer)
	if token == "" {
		token = "_"
	}
	return "chio.receipts." + token
}

// EventsStreamConfig is the configuration of EventsStream. Every component
// that publishes or consumes events creates or updates it with this config,
// so whichever starts first brings the same stream up. Events are kept
// forever: the log and the projections are rebuilt from them.
func EventsStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        EventsStream,
		Description: "Chio decision, outcome and timeout events",
		Subjects:    []string{EventsSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    max(replicas, 1),
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardNew,
		MaxMsgSize:  MaxEventBytes,
	}
}

// ReceiptsStreamConfig is the configuration of ReceiptsStream. It is a
// derived copy of the log, so it is persisted asynchronously even where the
// server syncs every write: a tail lost in a crash is republished, because
// the ledger resumes publishing after the last receipt the stream holds.
func ReceiptsStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        ReceiptsStream,
		Description: "Chio signed receipts, published by the ledger after commit",
		Subjects:    []string{ReceiptsSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    max(replicas, 1),
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardNew,
		PersistMode: jetstream.AsyncPersistMode,
	}
}
