// Package mcpbridge wraps an MCP server, run as a command over stdio or
// reached over streamable HTTP with the official MCP Go SDK's client, as a
// tools.Server: each upstream tool becomes a Chio tool of the bridge's
// server id, so every call of it is governed like any other (capability,
// guards, durable decision, outcome, receipt) on every edge.
//
// The manifest carries the upstream's input and output schemas (top-level
// x-chio-* members removed: hints are not the upstream's to set) and a
// fidelity rating (MetaFidelity). The MCP annotations are what the server
// claims, kept verbatim (MetaAnnotations) and mapped with MCP's defaults:
// readOnlyHint is "no side effects"; destructiveHint (true unless the
// tool is read-only or says false) sets tools.MetaDenyByDefault, which the
// kernel honours: only a grant naming the tool reaches it.
//
// Untrusted input: every upstream message is bounded (MaxAnswerBytes),
// read with strictjson and scrubbed of the operator's credentials (HTTP
// headers, command environment) with internal/redact before the SDK sees
// it; a refused answer fails its call with the reason. An isError answer,
// a protocol error and a server that dies are failed outcomes; a dead
// server is restarted with backoff, its calls in flight fail at once, and
// calls while it is down fail without being sent. notifications/tools/
// list_changed is followed: followed registries (Follow) get the new tool
// list. Progress notifications become stream chunks where an edge streams
// the call, and a cancelled call sends notifications/cancelled.
package mcpbridge
