// Package worker runs tool servers as NATS services (nats.go/micro) and
// calls them from an edge as ordinary tools.Servers, so tools can live in
// their own processes, in any number of replicas, behind every edge.
//
// A worker process (Serve) registers one micro service named ServiceName
// whose endpoints, per tool server, are:
//
//	chio.tools.<key>.invoke    queue-grouped: one replica runs each call
//	chio.tools.<key>.manifest  queue-grouped: the server's manifest
//	chio.tools.<key>.cancel    no queue group: every replica hears it
//
// where <key> is SubjectKey(server id) (a server id may hold characters a
// subject token cannot). Each endpoint's metadata names the server id and
// the SHA-256 of its canonical manifest, so `$SRV.INFO.chio-tools` lists
// what every replica serves.
//
// An edge finds the servers with Discover (a `$SRV.INFO` request whose
// replies are gathered for a short window), fetches each manifest once and
// registers a Remote per server. Remote.Invoke is one request/reply on the
// invoke subject, answered by whichever replica the queue group picks; the
// request names the manifest hash it was discovered with, and a replica
// serving another manifest refuses it without running it.
//
// Errors map to outcomes as the dispatcher reads them: nothing listening
// (NATS no-responders) is ErrNoWorker, a failed call that never ran; a
// request sent whose answer does not come (a replica that died, a
// timeout, the edge's own connection lost, the caller gone) is
// tools.ErrOutcomeUnknown, because the tool may have acted: the ledger
// closes the call incomplete. An answer is bounded (WithMaxAnswerBytes)
// and read with strictjson.
//
// A call whose answer does not come waits for its context's deadline or
// WithCallTimeout, whichever is first: NATS does not tell a requester
// that its responder died. A streamed call's chunks are gathered on the
// worker and relayed, in order, with its answer.
package worker
