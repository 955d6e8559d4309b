// Package acp is the ACP edge in Chio's ACP profile: it exposes Chio's
// kernel-governed tools as ACP capabilities
// over newline-delimited JSON-RPC 2.0 on stdio and over HTTP POST.
//
// The profile's methods are session/list_capabilities,
// session/request_permission, tool/invoke, tool/stream, tool/resume and
// tool/cancel; each is also accepted under "_chio/" (e.g.
// "_chio/tool/invoke") so that it is a valid ACP extension method, and
// ACP's initialize gets a protocol version 1 handshake. Every tool call
// goes through the dispatcher: a durable decision before the tool runs and
// a signed receipt after. Deferred tasks (tool/stream) live in the
// CHIO_ACP_TASKS key-value bucket, so any replica can resume or cancel
// them, and compare-and-set makes a resume run the tool at most once.
//
// Tasks and leases. The resume that moves a task to running takes its
// lease (the replica's instance id, WithTaskLease, 30 s by default) and
// renews it while the tool runs. Every replica watches the bucket; one
// whose sweep finds a running task's lease run out (its edge died, or was
// closed mid-run) claims it by compare-and-set, so exactly one replica
// takes it over, and runs it again under the capability its resume
// stored, as a new attempt with a receipt of its own; a capability
// honoured only with its holder's proof of possession cannot be, and
// its task is failed. A principal holds at most WithMaxLiveTasks (1000)
// pending or running tasks, counted from that watch on every replica
// (so across replicas, give or take the streams in flight at the same
// moment), and the bucket at most WithMaxTasks (1,000,000) tasks, a cap
// the server enforces (DiscardNew: a new key is refused, the tasks held
// can still be updated to their end). Either refusal is
// CodeResourceExhausted, and nothing is stored.
//
// Writes to the editor over stdio have a deadline (WithWriteTimeout):
// an editor that stops reading fails them, so the edge's calls and its
// shutdown never wait on it forever.
//
// Every message is read with strictjson before anything of it is: a
// member name repeated in one object, exactly or but for case, nesting
// past strictjson.MaxDepth, invalid UTF-8 or a lone surrogate, or data
// after the value make it a parse error (-32700), and nothing of it runs
// or is recorded. Names are matched exactly: a member that is a name the
// edge reads but for case ("Method", "_META") is refused (-32600 in the
// envelope, -32602 in params). A batch holds at most MaxBatch requests
// (a larger one is refused whole, -32600, before any of it runs), and
// once its client goes away no further request of it starts; one that
// has started finishes and is recorded.
//
// Holder binding. A capability that can delegate (or whose grant sets
// dpop_required, or any under --require-dpop) is honoured only with a
// proof of possession of its subject key: over HTTP an RFC 9449 proof
// (Authorization: DPoP <capability> with a DPoP header), one per HTTP
// request and shared by the messages of a batch; or, per call, a
// chio.dpop_proof.v1 in params._meta.chioDpopProof (MetaDPoPProof), beside
// params._meta.chioCapability.
//
// A tool proof names one operation, and is honoured for that one only:
//   - tool/invoke: the tool call (the capability's server id and tool
//     name, action_hash over its arguments);
//   - tool/resume: the task's tool call (its capability's tool and the
//     arguments stored by tool/stream), checked before the resume answers
//     anything, a stored outcome included;
//   - any other method (tool/stream, tool/cancel,
//     session/list_capabilities, session/request_permission): the request
//     itself, tool_server "acp" (RequestServer), tool_name the method as
//     sent (with its _chio/ prefix if it has one), action_hash the SHA-256
//     hex of the RFC 8785 form of the params object without its _meta
//     member (RequestArguments; RequestProof signs it).
//
// A proof for another operation is refused as wrong_call.
//
// Over stdio the session's own capability is checked at start. A call
// without a proof acts under it without one only for
// session/list_capabilities and session/request_permission, which answer
// from what the token itself states (its grants against the published
// table), change nothing and record nothing. tool/invoke, tool/stream,
// tool/resume and tool/cancel need the proof their token needs: a process
// started with a rebuilt parent token cannot store, run or cancel its
// holder's tasks. A refused tool/invoke or tool/stream, and a refused
// tool/resume of the token's task, has its deny receipt.
//
// A refused proof is a CodeUnauthorized error whose data names the check
// (dpopCheck), over HTTP a 401 with the DPoP challenge when the request
// was a single one. A proof that cannot be checked because the replay
// state is unreachable (state_unavailable) is a server condition:
// CodeInternal, over HTTP a 503 with Retry-After, the receipt kept.
//
// The governing proxy between an editor and a real ACP agent is package
// edges/acp/proxy.
package acp
