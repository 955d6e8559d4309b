// Package acp is the ACP edge in the seed's profile: it exposes Chio's
// kernel-governed tools as ACP capabilities (bridges spec, "ACP Edge")
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
// Holder binding. A capability that can delegate (or whose grant sets
// dpop_required, or any under --require-dpop) is honoured only with a
// proof of possession of its subject key: over HTTP an RFC 9449 proof
// (Authorization: DPoP <capability> with a DPoP header), one per HTTP
// request and shared by the messages of a batch; or, per call, a
// chio.dpop_proof.v1 in params._meta.chioDpopProof (MetaDPoPProof), beside
// params._meta.chioCapability, naming the call's tool and arguments. Over
// stdio the session's own capability, checked at start, serves the
// methods that run no tool; under a capability that needs a proof, a
// tool/invoke or tool/resume brings its tool proof, or is refused with its
// deny receipt. A refused proof is a
// CodeUnauthorized error whose data names the check (dpopCheck), over
// HTTP a 401 with the DPoP challenge when the request was a single one.
//
// The governing proxy between an editor and a real ACP agent is package
// edges/acp/proxy.
package acp
