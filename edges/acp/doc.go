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
// The governing proxy between an editor and a real ACP agent is package
// edges/acp/proxy.
package acp
