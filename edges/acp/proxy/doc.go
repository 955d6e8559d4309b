// Package proxy governs an ACP session between a real editor (the ACP
// client) and a real ACP agent: `chio edge acp --proxy -- AGENT ARGS`.
// The editor launches chio as its agent; chio launches the agent and
// relays newline-delimited JSON-RPC both ways, unchanged except where it
// governs:
//
//   - The agent's requests to the client that act on the editor's machine
//     (fs/read_text_file, fs/write_text_file, terminal/create, output,
//     wait_for_exit, kill, release) are governed calls on tool server
//     "acp", the tool named by the method: the kernel checks the
//     capability and the guards, the decision is made durable, and only
//     then is the request forwarded to the editor; its answer is the
//     call's outcome and the receipt is signed by the ledger. A denied
//     request gets a JSON-RPC error and a deny receipt; the editor never
//     sees it.
//   - session/request_permission is answered by policy when the
//     capability names the tool in a root grant (allow if the kernel
//     allows, a reject option if it denies), and otherwise asked of the
//     human through the editor, whose answer the receipt records.
//   - initialize advertises to the agent only the client capabilities
//     (fs.readTextFile, fs.writeTextFile, terminal) that the capability
//     grants at all.
//   - Other agent requests are refused (-32601): an extension, MCP or
//     elicitation method could act on the machine, or on the human,
//     without a receipt. session/update notifications and answers to the
//     editor's requests pass through.
//
// Every line, from either side, is read with strictjson: one with a
// member name repeated (exactly or but for case, at any depth), nesting
// past strictjson.MaxDepth, invalid UTF-8, a lone surrogate or data after
// the value is dropped and answered -32700, and one with members other
// than JSON-RPC's (spelt exactly) -32600, since a peer reading JSON
// differently could see another method or path. The answer goes under the
// line's id when its first members tell it unambiguously (a request is
// refused; an answer to a forwarded request fails that call, an answer to
// the editor's request is replaced by the error), else without an id.
// Every message is rebuilt from its parsed envelope, and a governed
// request's params are re-encoded from the decoded request its arguments
// came from, so the editor acts on what the proxy judged.
// The editor sees forwarded requests under ids of the proxy's own. What
// passes ungoverned (session/update params, answers to the editor) keeps
// the agent's content.
//
// The governed arguments are what the kernel, the guards and the receipt
// see: the session id and the path, the command with its arguments and
// working directory, or the terminal id (with its command). File contents
// and environment values are not arguments: a write records the content's
// SHA-256 and size, a terminal its environment's names.
//
// The proxy acts under one capability and makes the governed calls
// itself. A capability that needs a proof of possession of its subject
// key (one that can delegate, a grant with dpop_required, any under
// --require-dpop) needs that key: WithSigner, and every governed call
// then carries a chio.dpop_proof.v1 for it, the receipt recording the
// binding; without it New refuses such a capability.
//
// A forwarded request whose answer can no longer come (the agent exited,
// the editor went away) records no outcome: the ledger closes it as
// incomplete, since the editor may or may not have acted.
//
// A person may take longer to answer a permission request than the
// ledger's --incomplete-after: the decision of one asked of the human
// carries an outcome_deadline (WithApprovalWait, 1 h by default, plus a
// minute to record the answer), before which the ledger does not close
// it; a person who has not answered within the wait is cut off like a
// lost answer (the editor told to cancel, the ledger closing the call at
// its deadline).
//
// Every line written to either side has a deadline (WithWriteTimeout,
// 10 s by default): a side that stops reading fails that write and all
// later ones, so a governed call waiting on it, and the end of the
// session, never wait forever. An editor that stops reading is then
// treated as one that left: the agent's input is closed.
package proxy
