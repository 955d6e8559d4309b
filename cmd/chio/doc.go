// Command chio runs Chio ledger. `chio up` runs everything in one process:
// an embedded NATS JetStream server, the ledger, the projections and every
// edge (A2A over JSON-RPC, REST and gRPC, OpenAI, MCP, ACP, and optionally
// an OpenAPI bridge, api protect, partner A2A agents and wrapped MCP
// servers) on one HTTP address. `chio ledger`, `chio projections`,
// `chio edge …` and `chio worker` run each part on its own against a NATS
// cluster; the rest are operator tools (keygen, capability, verify,
// evidence, monitor, trust, …).
//
// Invariants the commands keep:
//
//   - A mistake in the flags exits with status 2 (usageError); any other
//     failure with 1.
//   - A command that owns a data dir opens its log store before it starts
//     or connects to NATS: the store's directory lock is what stops a
//     second process on the same data dir.
//   - Stopping `chio up` (SIGINT or SIGTERM) drains the edges while the
//     ledger still runs, so calls in flight finish and their events become
//     receipts; NATS closes last.
//   - `chio up` hands its dev capability to tokenless callers only on
//     loopback addresses; elsewhere it needs --require-capability.
package main
