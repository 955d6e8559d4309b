// Package natsauth holds who may do what on Chio's NATS: the roles (edge,
// ledger, projections, worker, operator, reader), the exact subjects each
// may publish and subscribe to, the credentials `chio up` generates for
// them, and the client options every command connects with.
//
// The permission table here is the one source: chio up's embedded server
// is configured from it, the shipped NATS configuration
// (deploy/nats/permissions.conf) is rendered from it and checked against
// it by a test, and docs/security.md describes it.
//
// A permission is an allow list: anything not listed is refused by the
// server with a permissions violation. JetStream's API is reached through
// subjects too ($JS.API.…), so stream and consumer administration is
// granted per stream. Every role's request replies come back on its own
// inbox prefix (InboxPrefix), so no role can subscribe to another's
// replies, which carry the messages of its consumers.
package natsauth

import (
	"slices"
	"time"
)

// Role is one kind of part that connects to NATS.
type Role string

// The roles.
const (
	// Edge decides calls: it publishes decision and outcome events and
	// task commits, and keeps the edges' shared state (budgets, DPoP
	// replay, push configs, deferred tasks); it reads revocations.
	Edge Role = "edge"
	// Ledger folds events into receipts: it reads the event stream,
	// writes timeout events, the receipt stream, its writer lease and
	// witness state.
	Ledger Role = "ledger"
	// Projections fold the events, tasks and receipts into their store.
	Projections Role = "projections"
	// Worker serves tools over NATS (chio worker) and nothing else.
	Worker Role = "worker"
	// Operator revokes capabilities and administers JetStream.
	Operator Role = "operator"
	// Reader reads the streams (rebuilds, audits) and writes nothing.
	Reader Role = "reader"
)

// Roles lists every role, in the order the documentation gives them.
func Roles() []Role { return []Role{Edge, Ledger, Projections, Worker, Operator, Reader} }

// InboxPrefix is the inbox prefix of the role's connections: replies to
// its requests, and its consumers' messages, arrive under it.
func (r Role) InboxPrefix() string { return "_INBOX_" + string(r) }

// Grant is what a role may do: the subjects it may publish to and
// subscribe to (NATS wildcards), and whether it may answer requests it
// received (a worker answering an edge's call on the edge's inbox).
type Grant struct {
	Publish []string
	// DenyPublish are subjects refused even where Publish allows them:
	// the controls of another role's durable consumers (ownedDurables).
	DenyPublish []string
	Subscribe   []string
	// Responses lets the role publish to the reply subject of a message
	// it received on an allowed subscription, any number of times within
	// ResponseWindow.
	Responses bool
}

// ResponseWindow is how long after a request a worker may still answer
// it: a tool call's answer can come after minutes.
const ResponseWindow = time.Hour

// Stream, bucket and subject names, spelled out here so that this package
// imports nothing of the module (schemas imports nats.go only). A test
// checks them against schemas and the packages that own them.
const (
	eventsStream   = "CHIO_EVENTS"
	receiptsStream = "CHIO_RECEIPTS"
	tasksStream    = "CHIO_TASKS"
	outboxStream   = "CHIO_A2A_PUSH_OUTBOX"

	revocations = "CHIO_REVOCATIONS"
	budgets     = "CHIO_BUDGETS"
	velocity    = "CHIO_VELOCITY"
	proofs      = "CHIO_DPOP_PROOFS"
	proofsEpoch = "CHIO_DPOP_EPOCH"
	pushConfigs = "CHIO_A2A_PUSH"
	acpTasks    = "CHIO_ACP_TASKS"
	a2aTasks    = "CHIO_A2A_TASKS"
	lease       = "chio-ledger-lease"
	quarantine  = "CHIO_QUARANTINE"
	witness     = "CHIO_WITNESS"
	logState    = "CHIO_LOG"
)

// durable is a durable consumer a role owns on a stream.
type durable struct {
	owner        Role
	stream, name string
}

// ownedDurables are the parts' durable consumers under their default
// names. Reading a stream (use) allows creating, pulling from,
// acknowledging for and deleting any consumer of it, since NATS subjects
// cannot match part of a token (ordered consumers get random names); so
// every other role is denied these names: a reader that pulled and
// acknowledged the ledger's events would make the ledger skip them, and
// one that deleted its consumer would stop it. A part run under another
// durable name is not covered.
func ownedDurables() []durable {
	return []durable{
		{Ledger, eventsStream, "chio-ledger"},
		{Projections, eventsStream, "chio-projections-events"},
		{Projections, receiptsStream, "chio-projections-receipts"},
		{Projections, tasksStream, "chio-projections-tasks"},
		{Edge, tasksStream, "chio-a2a-push"},
		{Edge, outboxStream, "chio-a2a-push"},
	}
}

// controls are the subjects that act on durable d: create it (either
// API), pull from it, acknowledge its messages, delete it.
func (d durable) controls() []string {
	api, at := "$JS.API.CONSUMER.", d.stream+"."+d.name
	return []string{api + "CREATE." + at, api + "CREATE." + at + ".>", api + "DURABLE.CREATE." + at,
		api + "MSG.NEXT." + at, api + "DELETE." + at, "$JS.ACK." + at + ".>"}
}

// kvStream is the stream behind a KV bucket.
func kvStream(bucket string) string { return "KV_" + bucket }

// use is what reading a stream takes: its info, consumers of it (create,
// look up, list, pull, acknowledge, delete), and direct and message gets.
func use(stream string) []string {
	api := "$JS.API."
	return []string{
		api + "STREAM.INFO." + stream,
		api + "CONSUMER.CREATE." + stream,
		api + "CONSUMER.CREATE." + stream + ".>",
		api + "CONSUMER.DURABLE.CREATE." + stream + ".>",
		api + "CONSUMER.INFO." + stream + ".>",
		api + "CONSUMER.MSG.NEXT." + stream + ".>",
		api + "CONSUMER.DELETE." + stream + ".>",
		api + "CONSUMER.LIST." + stream,
		api + "CONSUMER.NAMES." + stream,
		api + "DIRECT.GET." + stream,
		api + "DIRECT.GET." + stream + ".>",
		api + "STREAM.MSG.GET." + stream,
		"$JS.ACK." + stream + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// publishOnly is what a part that writes to a stream but must not read it
// takes: its info, its consumers' list (configurations, no messages), and
// creating it when it does not exist yet.
func publishOnly(stream string) []string {
	api := "$JS.API."
	return []string{api + "STREAM.INFO." + stream, api + "STREAM.CREATE." + stream,
		api + "CONSUMER.LIST." + stream, api + "CONSUMER.NAMES." + stream}
}

// open is use plus creating the stream when it does not exist yet (with
// the shared configuration): a part that starts before the stream's owner
// brings it up, but cannot change it once it exists.
func open(stream string) []string {
	return append(use(stream), "$JS.API.STREAM.CREATE."+stream)
}

// own is open plus changing the stream's configuration: the role that
// owns it.
func own(stream string) []string {
	return append(open(stream), "$JS.API.STREAM.UPDATE."+stream)
}

// kv is what keeping a bucket takes: owning its stream and writing its
// keys (a put, a delete and a purge are all publishes to $KV.<bucket>.…).
func kv(bucket string) []string {
	return append(own(kvStream(bucket)), "$KV."+bucket+".>")
}

// Grant returns the role's permissions.
func (r Role) Grant() Grant {
	inbox := r.InboxPrefix() + ".>"
	base := []string{"$JS.API.INFO"} // account info: every part waits for JetStream with it
	var g Grant
	switch r {
	case Edge:
		g.Publish = concat(base,
			[]string{"chio.events.decision", "chio.events.outcome", "chio.events.envelope", "chio.tasks.*"},
			publishOnly(eventsStream), own(tasksStream), use(receiptsStream),
			// Task retention purges the tasks that ended long ago.
			[]string{"$JS.API.STREAM.PURGE." + tasksStream},
			open(kvStream(revocations)), use(kvStream(logState)),
			kv(budgets), kv(velocity), kv(proofs), kv(proofsEpoch), kv(pushConfigs), kv(acpTasks), kv(a2aTasks),
			own(outboxStream), []string{"chio.a2a.push.outbox.*"},
			// Workers: discovery and calls (requests; the worker answers
			// on this role's inbox).
			[]string{"$SRV.>", "chio.tools.*.invoke", "chio.tools.*.manifest", "chio.tools.*.cancel"},
		)
	case Ledger:
		g.Publish = concat(base,
			[]string{"chio.events.timeout", "chio.receipts.>", "chio.quarantine.>"},
			own(eventsStream), own(receiptsStream), own(quarantine), open(kvStream(revocations)),
			// Event retention purges what the log and every reader hold.
			[]string{"$JS.API.STREAM.PURGE." + eventsStream},
			kv(lease), kv(witness), kv(logState), kv(proofs), kv(proofsEpoch),
		)
	case Projections:
		g.Publish = concat(base,
			open(eventsStream), open(receiptsStream), open(tasksStream), open(kvStream(revocations)),
			kv(proofs), kv(proofsEpoch),
		)
	case Worker:
		// Revocations read: a revoked edge credential's calls are refused.
		g.Publish = concat(base, use(kvStream(revocations)))
		g.Subscribe = []string{"chio.tools.*.invoke", "chio.tools.*.manifest", "chio.tools.*.cancel", "$SRV.>"}
		g.Responses = true
	case Operator:
		// Administration is the whole JetStream API; of the data
		// subjects, only revocations.
		g.Publish = concat(base, []string{"$JS.API.>", "$KV." + revocations + ".>"}, use(kvStream(revocations)))
	case Reader:
		g.Publish = concat(base, use(eventsStream), use(receiptsStream), use(tasksStream), use(quarantine), use(kvStream(revocations)))
		// The live events too: what its consumers read already.
		g.Subscribe = []string{"chio.events.>"}
	}
	g.Subscribe = append(g.Subscribe, inbox)
	g.Publish = dedup(g.Publish)
	// The operator administers JetStream and keeps its whole API.
	if r != Operator {
		for _, d := range ownedDurables() {
			if d.owner != r {
				g.DenyPublish = append(g.DenyPublish, d.controls()...)
			}
		}
	}
	return g
}

func concat(parts ...[]string) []string { return slices.Concat(parts...) }

func dedup(s []string) []string {
	seen := map[string]bool{}
	out := s[:0]
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
