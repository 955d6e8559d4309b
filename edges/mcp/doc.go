// Package mcp is the Model Context Protocol edge: the exposed tools of any
// tools.Server in the registry, served to MCP clients over the streamable
// HTTP transport (stateless, at Path) and over newline-delimited stdio
// JSON-RPC, with the official MCP Go SDK doing the protocol.
//
// tools/list shows the tools the caller's capability may invoke;
// tools/call runs each call through edges/dispatch (kernel, durable
// decision event, tool, durable outcome event) and answers a
// CallToolResult whose _meta.chio carries Chio's verdict and receipt id.
// The capability comes with every HTTP request (Authorization: Bearer or
// X-Chio-Capability), so any replica can serve any request: the edge keeps
// no session and no state of its own.
//
// Holder binding. A capability that can delegate (or whose grant sets
// dpop_required, or any under --require-dpop) is honoured only with a
// proof of possession of its subject key. Over HTTP that is an RFC 9449
// proof: Authorization: DPoP <capability> with a DPoP header for the POST
// to the edge (dpop.Transport makes both for the SDK's client); one proof
// covers one HTTP request, every call of a batch included. A tools/call
// may instead (or as well) carry a chio.dpop_proof.v1 in
// params._meta["chio/dpop_proof"] (MetaDPoPProof), naming the Chio server
// id and tool name of the call (a listed tool's _meta.chio) and the hash
// of its arguments; it is honoured for that call only (a simulated one
// included). Over stdio that is the only proof a call can bring; the
// session's own capability lists its tools without one (tools/list
// answers only what the token itself grants, changes nothing and
// records nothing), and no other method acts for the holder. A refused
// proof is answered like a refused capability (401 with the DPoP
// challenge over HTTP, CodeUnauthorized, error data naming the check
// under dpop_check), after the call's deny receipt; the receipt of an
// allowed call records how its caller proved who it is. A presentation
// wrong in form (Authorization: DPoP without a DPoP header, two DPoP
// headers, a DPoP header beside a bearer token) is refused so, whatever a
// call's own proof. A proof that could not be checked because the replay
// state is unreachable (state_unavailable) is a server condition: a
// JSON-RPC internal error (-32603), over HTTP a 503 with Retry-After, the
// deny receipts kept.
//
// Tool names. A tool is listed under its own name when that fits MCP's
// rule ([A-Za-z0-9_.-], at most 128 characters) and no other exposed tool
// has it; otherwise under "<server>__<tool>", or, when that does not fit
// or is taken, under a sanitized form ending in a digest of the pair (see
// Edge.Name). Names depend only on the exposed tools, so every replica
// agrees; adding a server whose tool shares a name renames both.
//
// Reading. Every HTTP body and stdio line is read with strictjson before
// the SDK sees it, so that the edge, the SDK and the record cannot read one
// request two ways (the SDK keeps the last of repeated members and matches
// member names exactly; encoding/json folds case). A body it refuses (a
// repeated or case-variant member, invalid UTF-8, a lone surrogate,
// nesting past strictjson.MaxDepth, data after the value) is answered
// -32602 when the fault lies in a message's params, -32600 for a repeated
// member or too deep a nesting elsewhere, -32700 otherwise, over HTTP
// with status 400; nothing of it runs or is recorded. So is a numeric
// request id the SDK would not keep exact (an integer past 2^53-1 in
// magnitude, or one with a fraction or exponent): ids are answered and
// recorded exactly as sent, or refused. A batch holds at most
// MaxBatchMessages messages, and a stdio line at most MaxBodyBytes.
//
// Results. An allowed call whose tool succeeded has structuredContent =
// the tool's JSON output when that is an object, else {"result": output},
// and one text content holding that JSON. An output object with a numeric
// "httpStatus" of 400 or more (the shape of the OpenAPI bridge's tools) is
// still an allowed call, the API having answered, but is marked isError so
// the model notices. Denials, tool failures and calls that could not be
// recorded are isError results whose text starts with "chio:". Protocol
// mistakes (unknown tool, arguments that are not a JSON object) are
// JSON-RPC errors, and nothing reaches the kernel; a tool outside the
// caller's capability is answered as unknown too, so a caller cannot probe
// for it. A capability the kernel refuses gets 401 (a JSON-RPC error over
// stdio) after the deny receipts of the request's calls to listed tools.
package mcp
