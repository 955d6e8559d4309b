// Package taskstore keeps A2A tasks as event streams on JetStream, so that
// any replica of the A2A edge can read, cancel, resume and list any task:
// no replica holds task state in memory, and the task every read returns
// is the fold of its events. It is version-neutral: messages, artifacts,
// metadata and the deferred execution request are opaque JSON whose shape
// the edge's wire packages decide.
//
// # Layout
//
// One stream, CHIO_TASKS, with one subject per task, chio.tasks.<id>
// (ids are server-generated UUIDv7 strings). Each message on a subject is
// a commit: the events of one transition (created, status, message,
// artifact, metadata, request, claimed, released, receipt, canceled,
// finished) as one JSON document, so a transition is atomic, and a size
// check before the publish means nothing is ever partly written.
//
// # Concurrency
//
// Every change goes through Store.Transition: load the task, let a
// function decide the events from the current state, check them against
// the fold, and publish with the expected last subject sequence of the
// load. A writer that loses the race gets a conflict from the stream,
// reloads and decides again (a bounded number of times, with jittered
// backoff; then ErrConflict). Two replicas therefore cannot interleave
// writes to a task, and decisions such as "claim if unclaimed" or "complete
// unless canceled" are made on the state the write lands on. The fold
// refuses every event after a terminal state except a receipt link, both
// before writing (ErrAlreadyTerminal, nothing written) and when reading
// (a commit from a writer that bypassed Transition is skipped), so a
// cancel that lands while a task runs wins and the late result is
// discarded. A publish whose acknowledgement is lost is read back: each
// commit carries a message id, and a reload that finds it counts as
// success instead of deciding again.
//
// # Group commit
//
// On a single node (one stream replica, the server syncing every write)
// the server fsyncs each message on its own, one after the other, so n
// concurrent commits on n tasks wait for n fsyncs in series. A Store
// therefore hands every commit to its committer (batch.go), which writes
// the commits that wait at the same time as one JetStream atomic batch:
// one fsync for all of them, each still checked against its own expected
// subject sequence, all stored or none. A batch has a fixed cost on one
// node (the server stages it in a store of its own), so it is used only
// when at least WithBatchThreshold commits on as many distinct tasks
// wait (default 16); below that every commit goes out as a message of its
// own, concurrently, as without group commit. One batch is in flight at a
// time (the server serialises them anyway); what arrives meanwhile waits
// for the next one; two commits on one task never share a batch. A caller
// whose context ends while its commit waits is dropped: nothing written.
//
// A batch the server refuses (a stale expected sequence, a message id it
// already holds, any other error) stored nothing, and the server does not
// say which commit caused it: every commit of it is then published alone,
// so that each gets exactly the answer it would have got without group
// commit (the stale one a conflict, the others success). A batch whose
// commit gets no answer (a timeout, a lost connection) leaves every
// commit's outcome unknown, and each caller reads its task back as for a
// lost acknowledgement: the batch landed whole or not at all.
//
// The task stream therefore costs a blocking send one synced write of its
// own beside its outcome event's, and below the threshold those writes
// queue behind each other's fsyncs. Carrying the task's commit in the
// outcome's write instead (one fsync for both, on CHIO_EVENTS) would
// remove it, but the commit must still reach this stream before the
// answer, or a GetTask on any replica right after it misses the task, and
// after a crash something must replay commits from CHIO_EVENTS that never
// reached it, which the ledger and the projections would have to skip:
// a change of both streams' contracts, not of this package alone.
//
// With more than one replica the stream's Raft log already writes
// concurrent proposals together, so group commit is off there, and the
// stream does not allow atomic batches (schemas.TasksStreamConfig decides
// that from the replica count alone, so the edge and the projections give
// it the same configuration).
//
// # Leases
//
// Store.Claim gives one replica the execution lease of a deferred task
// (submitted or working, not terminal, not waiting for the client). It
// wins only when no other replica holds an unexpired lease; the holder
// may renew. A lease that expired (its replica died or stalled) may be
// claimed by another replica: Task.Attempt counts those takeovers and
// Task.ExecutionID, fixed by the first claim, stays the same, so the edge
// keys the tool call's idempotency on ExecutionID. "At most once" thus
// holds per lease; across a takeover it holds through that idempotency
// key. Whoever executes a task that has a Request must hold its claim;
// Store.Claimable lists the tasks left unclaimed past a grace period or
// with expired leases, for a sweeper on any replica. Leases are checked
// against the local clock and must be far longer than the clock skew
// between replicas.
//
// # Limits
//
// Nothing a caller does may grow the stream without bound, and nothing
// may leave a task stuck half way. The stream has caps the server
// enforces (WithMaxStreamMsgs, 100M commits; WithMaxStreamBytes, none by
// default since a byte cap reserves that much of the server's storage;
// WithMaxCommitsPerTask, 100k per task), all under DiscardNew (per
// subject too): a write past a cap is refused, never made room for by
// dropping old commits, which would cut a task's fold in half. A full
// stream would then refuse the commits of tasks already running too, so
// AdmitOwner refuses new tasks (ErrStoreFull) once the stream is at 90%
// of a cap, keeping the rest for the tasks it holds; a task's last commit
// below its own cap is kept for the commit that ends it.
//
// AdmitOwner also bounds the live tasks of a principal (not terminal:
// submitted, working or waiting for input; WithMaxLiveTasksPerOwner,
// 1000), ErrQuotaExceeded past it. The count comes from the stream
// itself: an index that follows the summary header of every task's last
// commit (as Live does), on every replica, so the quota is one across
// replicas rather than one per replica, which would multiply it by the
// replica count and change with it. Its only slack is the tasks being
// accepted at the same moment that no index has seen yet.
//
// # Retention
//
// An Expirer (expire.go) purges a task's subject, every commit at once,
// once the task has ended, its last commit is older than the retention
// (DefaultRetention, a week) and every durable consumer of the stream has
// acknowledged that commit. A live task is never purged; a purged one is
// ErrNotFound. The walk goes through the stream in sequence order, which
// is time order, and stops at the first message younger than the
// retention, so a pass costs what has aged since the last one; the old
// tasks it must keep are looked at again by subject.
//
// # Listing
//
// Every commit also carries, in a header, the summary of the task it
// produces (owner, context, state, status time, claim, generation). The last message
// of each task subject therefore describes the task as of now, and
// Store.List reads only those headers through an ephemeral headers-only
// consumer with DeliverLastPerSubject: there is no separate index that
// could fall behind the stream (a crash between a write and an index
// update cannot leave a stale entry). It then filters by owner, context,
// state and status time, sorts newest status first (ties: id descending),
// pages with an opaque cursor (status time, id) and loads the page's
// tasks. The cost is one small header per task in the stream per List,
// fine for tens of thousands of tasks; beyond that, a KV index keyed by
// owner would be the next step. A task whose status changes between two
// page requests moves in the order, as with any cursor over a live sort
// key.
//
// # Reads
//
// Load reads a task's commits with batched direct gets (one request for
// up to 256 commits). With more than one stream replica a direct get may
// be served by a follower a few milliseconds behind the leader, as for a
// JetStream KV get; writes are unaffected, since the leader checks the
// expected sequence and a stale read only costs a retry.
//
// Store.Watch follows one task with its own ordered consumer from the
// first event on, for SSE subscribers; every watcher sees the same events
// in the same order.
//
// # Generations
//
// Every task has a generation (A2A 1.1 draft, Task.generation): 1 once
// created, then +1 per client-visible mutation, which a stream shows as
// exactly one event. The rule is part of the fold (schemas.TaskHead.Apply,
// "Generations"), so Load, Watch and the projections compute it alike from
// the commits, on any replica; no event stores it (each commit's summary
// header records it for Follow, see below):
//
//   - mutations: created (1), status (any non-terminal status, a progress
//     update that keeps the state included), canceled, finished, and an
//     artifact event holding an A2A artifact (whole or a chunk);
//   - not mutations: message (history), metadata, request, claimed (a
//     claim or a lease renewal), released and receipt. They ride along:
//     what they change shows in the next mutation's event, or the task
//     when read, never as an event or a generation of their own; a receipt
//     linked after the terminal event changes the task's metadata but not
//     its generation.
//
// Task.Generation is the loaded task's generation; Watch sets
// Event.Generation on each mutation (0 on the rest). The edge names SSE
// events by it, replays a resumed stream from it (any replica folds the
// same numbers from the stream), and checks a send's ifGenerationMatch
// against it inside Transition's compare-and-set, so the check and the
// turn it starts are one atomic write.
//
// Follow sets Event.Generation too (push notifications carry it), with the
// same numbers, but without folding: a shared follower sees each commit
// once, of any task, and folding the task from its start for every commit
// would cost a read of the whole task per commit. Instead every commit
// records, in its summary header ("g"), the task's generation after it,
// which the writer knows: it has just folded the commit's events onto the
// task it expects to append to (the expected subject sequence makes that
// the task the commit lands on). Whether an accepted event is a mutation
// depends on the event alone (schemas.TaskEvent.Mutates, by which the fold
// itself counts), and every event of a commit a store wrote was accepted,
// so Follow numbers the commit's mutations backwards from that generation:
// the last one has it, each one before it one less. The header field is
// optional, so the layout stays compatible both ways: commits written
// before it existed decode as before and their events keep Generation 0
// (a push of such a commit carries no generation), and a reader that
// predates it ignores it. It records derived state, like the rest of the
// summary, never anything the fold reads: Load, Watch and the projections
// still compute generations from the events. Storing it in the commit
// body instead would have counted against the task's size limit and
// changed the document the projections decode; a cache of generations per
// task in the follower would not survive a restart or be shared by the
// replicas the follower's consumer spreads commits over.
package taskstore
