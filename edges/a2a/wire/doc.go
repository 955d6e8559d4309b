// Package wire is the pure protocol layer of Chio's A2A edge: the canonical,
// version-neutral task model, the A2A 1.0 and 0.3 JSON dialects (plus the
// hello-a2a stdio profile), the JSON-RPC 2.0 envelope, A2A errors, the method
// table, the dual-format agent card and the tool-result conversions. It does
// no I/O: the server decodes bytes with it, works on the canonical model and
// encodes the answer with it.
//
// # Dialects
//
// NegotiateVersion maps the A2A-Version header (or query parameter) to a
// Version: missing or empty means 0.3, "1.0" and "0.3" are served, anything
// else is VersionNotSupported (-32009).
//
// Method names are accepted whatever was negotiated, because each name
// belongs to exactly one dialect and its sender can only parse that
// dialect's shapes: LookupMethod reports in Method.Version the dialect the
// response must be encoded in. A 1.0 name (SendMessage) is answered in 1.0
// shapes and a 0.3 name (message/send, tasks/send) in 0.3 shapes even when
// the header says otherwise; only the dialect-neutral Chio names task/get
// and task/cancel follow the negotiated version. The stdio loop passes
// VHelloStdio, which answers every method in the hello-a2a shapes.
//
// # Decoding
//
// Decoders accept every dialect's input shapes at once (ROLE_USER or user;
// member-name, kind and legacy type parts; returnImmediately or blocking) and
// return the canonical model or an *Error ready to send (-32600 for envelope
// faults, -32602 naming the offending field for parameter faults). They never
// panic, whatever the input.
package wire
