package schemas

import (
	"encoding/base64"
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

	// HeaderLeafIndex is the header of a receipt published on
	// ReceiptsStream that carries its leaf index in the log.
	HeaderLeafIndex = "Chio-Leaf-Index"

	// HeaderReplica is the header of a task commit on TasksStream that
	// names the edge replica that wrote it (its edge id), so a task's
	// timeline can say who wrote each commit.
	HeaderReplica = "Chio-Replica"

	// LedgerConsumer is the ledger's default durable consumer on
	// EventsStream: readers outside the ledger (the projections' status)
	// measure the ledger's lag by it.
	LedgerConsumer = "chio-ledger"

	// DuplicateWindow is the publish dedup window of both streams.
	DuplicateWindow = 2 * time.Minute

	// PullExpiry is the expiry of the pull requests of the ledger's and
	// the projections' long-running consumers. nats.go sets the idle
	// heartbeat to half of it and re-pulls after two missed heartbeats,
	// so it bounds how long a pull request lost or left unserved can stall
	// a consumer that has work waiting: 5 s instead of the default 30 s
	// (seen once in CI as a 30 s stall of a projection consumer).
	PullExpiry = 5 * time.Second
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

// StreamCompression is how the event, task and receipt streams store
// their message blocks: S2, which JetStream applies to a block as it is
// sealed, not to each write, so the synced write path an edge waits on is
// unchanged. Receipts and events are JSON with long repeated keys and hex:
// measured under chio up, S2 takes the three streams from about 6.6 kB to
// about 0.8 kB per receipt. Changing it on a running stream (an update)
// applies to blocks written after.
const StreamCompression = jetstream.S2Compression

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
		MaxMsgSize:  MaxEnvelopeBytes,
		Compression: StreamCompression,
	}
}

// ReceiptsStreamConfig is the configuration of ReceiptsStream. It is a
// derived copy of the log, so on one node it is persisted asynchronously
// even where the server syncs every write: a tail lost in a crash is
// republished, because the ledger resumes publishing after the last receipt
// the stream holds. Replicated streams refuse async persistence (and need
// it less: a write is acknowledged once a quorum has it).
func ReceiptsStreamConfig(replicas int) jetstream.StreamConfig {
	mode := jetstream.AsyncPersistMode
	if replicas > 1 {
		mode = jetstream.DefaultPersistMode
	}
	return jetstream.StreamConfig{
		Name:        ReceiptsStream,
		Description: "Chio signed receipts, published by the ledger after commit",
		Subjects:    []string{ReceiptsSubjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Replicas:    max(replicas, 1),
		Duplicates:  DuplicateWindow,
		Discard:     jetstream.DiscardNew,
		PersistMode: mode,
		Compression: StreamCompression,
	}
}

// JetStream KV buckets of the governance state every edge replica shares.
const (
	// RevocationsBucket maps KVKey(capability id) to a Revocation. Every
	// kernel watches it, so a revocation reaches all replicas at once.
	RevocationsBucket = "CHIO_REVOCATIONS"
	// BudgetsBucket maps KVKey(capability id) + "." + grant index to the
	// grant's usage, updated only by compare-and-set.
	BudgetsBucket = "CHIO_BUDGETS"
	// VelocityBucket holds per-subject call counters per time window.
	VelocityBucket = "CHIO_VELOCITY"
	// ProofsBucket holds the one-time ids (jti, nonce) of accepted proofs
	// of possession until they could no longer be fresh: a proof is
	// accepted once across every replica.
	ProofsBucket = "CHIO_DPOP_PROOFS"
	// ProofsEpochBucket records which ProofsBucket is current and the
	// floor below which proofs are refused after a lost ProofsBucket was
	// replaced (internal/dpopreplay).
	ProofsEpochBucket = "CHIO_DPOP_EPOCH"
)

// KVKey encodes an id as a JetStream KV key. Ids may hold ':' and end in
// '.', which KV keys may not, so every id is base64url-encoded: injective,
// and the same on every replica.
func KVKey(id string) string { return base64.RawURLEncoding.EncodeToString([]byte(id)) }

// Revocation is the value stored under a revoked capability's key.
type Revocation struct {
	CapabilityID string `json:"capability_id"`
	RevokedAt    uint64 `json:"revoked_at"`
	Reason       string `json:"reason,omitempty"`
}

// RevocationsConfig is the configuration of RevocationsBucket.
func RevocationsConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: RevocationsBucket, Description: "Chio revoked capability ids",
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxValueSize: 4 << 10,
	}
}

// BudgetsConfig is the configuration of BudgetsBucket.
func BudgetsConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: BudgetsBucket, Description: "Chio grant budgets (invocations and cost charged)",
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxValueSize: 1 << 10,
	}
}

// ProofsConfig is the configuration of ProofsBucket: an entry lives ttl,
// which must cover a proof's whole acceptance window (its lifetime plus
// twice the clock skew). It is kept in memory: a claim is not fsynced
// (ProofsEpochBucket makes a lost bucket harmless).
func ProofsConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: ProofsBucket, Description: "Chio proof-of-possession one-time ids",
		Storage: jetstream.MemoryStorage, Replicas: max(replicas, 1), MaxValueSize: 64, TTL: ttl,
	}
}

// ProofsEpochConfig is the configuration of ProofsEpochBucket (on disk).
func ProofsEpochConfig(replicas int) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: ProofsEpochBucket, Description: "Chio proof replay state: current bucket and floor",
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxValueSize: 256, History: 1,
	}
}

// VelocityConfig is the configuration of VelocityBucket; counters of past
// windows expire after ttl.
func VelocityConfig(replicas int, ttl time.Duration) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket: VelocityBucket, Description: "Chio per-subject call counters",
		Storage: jetstream.FileStorage, Replicas: max(replicas, 1), MaxValueSize: 256, TTL: ttl,
	}
}
