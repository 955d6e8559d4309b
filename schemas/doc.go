// Package schemas is the wire contract shared by the edges, the ledger and the
// projections: the Go types of every record that crosses a process boundary,
// their JSON Schemas (embedded in FS), RFC 8785 canonicalization, hashing and
// Ed25519 signing helpers, and the JetStream stream and subject names.
//
// Edges, ledger and projections import this package and never each other.
package schemas
