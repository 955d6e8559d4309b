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
// The manifest endpoint answers the server's chio.signed_manifest.v1,
// signed with the worker's key (WithManifestKey, required). An edge finds
// the servers with Discover (a `$SRV.INFO` request whose replies are
// gathered for a short window), fetches each signed manifest once,
// concurrently and within WithManifestTimeout, and keeps a server only if
// its manifest verifies under the key the edge pins (WithWorkerKey,
// required): anyone who can answer $SRV.INFO could otherwise publish any
// server id and manifest (deny_by_default, exposure, hints) for the edge
// to sign and serve. A server that does not verify, does not answer in
// time, or whose id the edge already holds is logged and skipped; the
// others are still registered. Register adds a Remote per new server.
//
// Security: NATS permissions restrict publishing and subscribing on
// `chio.tools.>` and `$SRV.>` to edges and workers. Beyond them, every
// message on the invoke path is signed. An edge (WithEdgeSigner) signs
// each call and cancel with its certified edge key, and a worker with
// WithEdgeTrust runs only calls a certified edge signed, fresh, naming
// their decision's receipt id and never sent before: an edge's NATS
// credential alone runs no tool without the kernel. A worker signs every
// answer, result or refusal, with its manifest key over the request it
// answers (HeaderWorkerSignature), and a Remote takes no answer the
// pinned key did not sign (ErrForgedAnswer, the outcome unknown): a
// client that joins the queue group with a worker's NATS credential
// answers no call. Remote.Invoke is one request/reply on the
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
// Stopping a worker (Stop) refuses, unrun, the calls still arriving
// during the drain (ErrRefused: failed, not run), lets the calls running
// answer for at most WithDrainTimeout, then cancels them. An answer that
// would exceed the connection's max_payload, gathered stream chunks
// included, is not sent: the worker answers at once with an error the
// edge reads as ErrBadAnswer (the tool ran; the call is failed).
//
// A worker serves its servers' live manifests: when one changes (an MCP
// server's tools/list_changed), the manifest endpoint answers the new one,
// signed, and a call naming the old hash is refused unrun, since the edge
// governed it by the old definition. Follow refreshes each worker server
// the edge holds every interval and swaps the new manifest in
// (Registry.Replace); the $SRV.INFO metadata keeps the hash at Serve.
//
// A call whose answer does not come waits for its context's deadline or
// WithCallTimeout, whichever is first: NATS does not tell a requester
// that its responder died. A streamed call's chunks are gathered on the
// worker and relayed, in order, with its answer.
package worker
