// Package projections folds the JetStream streams into queryable state
// (A2A task state, capability lineage, a receipt index) and serves it over
// HTTP: tasks, lineage chains and the authorization-context report.
//
// It meets the edges and the ledger only through streams whose contracts
// are in schemas:
//   - CHIO_TASKS: every message is a schemas.TaskCommit on
//     chio.tasks.<task id>, folded by schemas.TaskHead.Apply, the fold the
//     A2A edge reads its tasks with (an event it refuses is skipped, and
//     after a terminal state only receipt links are accepted);
//   - CHIO_EVENTS: decision events, alone or in envelopes
//     (schemas.UnpackEvents), carry the presented token's capability
//     lineage, root first; each record is kept under its capability id,
//     the first one standing, and so is, for every prefix of the chain's
//     authority path, its principal's ancestry (schemas.LineagePrincipals):
//     what ties a task owner to the principals above it;
//   - CHIO_RECEIPTS: every signed receipt the ledger committed, with its
//     leaf index. Each is checked (structure, signature, the trusted kernel
//     key) and kept with the result, never dropped: a report that reaches
//     an unverified one fails closed. Receipts are deduplicated by id,
//     because the ledger republishes a tail after a crash. A receipt no
//     reader can decode whole (nested deeper than schemas.MaxReceiptDepth,
//     or not JSON) is kept too, named, indexed and selected by what its top
//     level says (schemas.ReadReceiptHead): a report whose selection holds
//     it, within the reader's scope, fails closed naming it (below); no
//     other report sees it, and a kernel denial is never in a selection.
//     Bytes whose top level does not read either are nobody's but an
//     operator's, and fail every operator report: no filter can leave
//     out what cannot be told apart.
//
// # Durability
//
// One durable pull consumer per stream, <name>-tasks, <name>-events and
// <name>-receipts. Each folds a batch of messages in stream order into one
// Pebble batch that also records the stream sequence of the last message
// (its position), commits it with sync, and only then acks the batch (the
// consumers ack all). The position in the store is the one of record: a
// redelivered message at or below it is acked and skipped, and on every
// start the server-side consumer is kept only if its ack floor is exactly
// the stored position with nothing un-acked; otherwise it is recreated to
// deliver from the position on. A restart therefore neither loses nor
// counts twice, whatever was in flight.
//
// The three folds write disjoint keys and read nothing of each other, and
// every stored byte comes from the streams (event times, sequences, leaf
// indexes), never from the clock or from where a batch happened to end.
// Rebuild folds the streams from the start into an empty store and
// produces the same bytes as the live service that folded the same
// sequences; Digest compares two stores.
//
// # Store layout
//
// Tasks: a head record per task (state, status, metadata, receipt ids),
// history messages and artifact events under keys of their own (appending
// to a long task is one write; artifact chunks are merged when served, as
// the edge merges them), and two list indexes, by creation order and by
// context and creation order, whose values are the task's state. Lineage:
// one record per capability id, and per principal the principals of its
// path's prefixes. Receipts: by id (dedup), by leaf index (the record:
// flags, why it did not verify, and the bytes as published of a receipt
// that did not verify; of a verified one, its RFC 6962 leaf hash, which
// the log's leaf at that index must have), by capability id and leaf
// index, and those naming no usable
// capability by leaf index.
//
// # HTTP
//
// GET /v1/tasks/{id}, GET /v1/tasks, GET /v1/lineage/{capability_id},
// GET /v1/lineage/{capability_id}/chain and
// GET /v1/reports/authorization-context. Every route needs a credential
// (internal/readauth: the service token, or a capability from a trusted
// issuer that is not revoked); there is no open mode. A capability that
// can delegate, or has a dpop_required grant, is honoured only as
// Authorization: DPoP with a proof of possession of its subject key for
// the request, used once (401 invalid_dpop_proof naming the failed check
// otherwise). Each caller reads only what its credential covers:
//   - an operator (the service token, or a chio.read/* grant): everything;
//   - anyone else: the tasks whose owner's authority path lies under one of
//     its principals (its own path, and those its chio.read/<principal>
//     grants name: a delegator sees its delegates' tasks, not the reverse);
//     the lineage of the capabilities of its own chain and of those whose
//     path lies under one of its principals; and report rows and counts of
//     the receipts whose capability's path lies under one of its principals
//     (not its ancestors'), chosen before the report is built so that no
//     other receipt can fail or show in it. A chio.read/receipts grant adds
//     no operator view.
//
// What a caller may not see is answered exactly as what does not exist
// (404 task_not_found or lineage_not_found, an empty list or report).
// Errors are JSON {"error", "code"}, with "param" naming the parameter of
// a 400, "receiptId" the receipt that made a report unprojectable (422)
// and "check" the failed check of a refused proof of possession. The
// report's schema has no place for a receipt it cannot show, so one that
// is unreadable fails the report rather than go missing from it: 422
// authorization_context_unprojectable, "receiptId" naming it and "error"
// saying "the stored receipt is unreadable: …". Narrowing the selection
// (capabilityId, toolServer, toolName, since, until) leaves it out; the
// ledger serves its signed bytes by id.
//
// The report's sender constraints come from each receipt's
// metadata.attribution.binding (projections/authz): the proof a call was
// honoured on (dpop or chio_dpop_v1, with the key's thumbprint), counted
// in senderBoundReceipts and dpopBoundReceipts; a binding the report
// cannot represent truthfully fails it closed.
package projections
