// Package a2aadapter is the consumer side of A2A: it discovers a remote A2A
// agent's card and turns each of its skills into one Chio tool, so that an
// agent calling a partner's agent does it under a capability token, through
// the guards, with a signed receipt, and with its call chain extended into
// the partner's receipts.
//
// Discover fetches the card (A2A 1.0, or 0.3 converted to the 1.0 type),
// applies the https rule (plain http only for loopback targets), the
// operator's partner admission Policy and the authorization plan, and picks
// one interface: A2A 1.0 before 0.3, then JSON-RPC before HTTP+JSON. gRPC
// interfaces are skipped: the Authorizer hands over an *http.Client, which a
// gRPC channel cannot use.
//
// The Adapter is a tools.Server under server id "a2a:<host>". Its tools take
// Chio's tool contract (see schema.go): a SendMessage superset, or one of
// the follow-up modes get_task, subscribe_task, cancel_task,
// create_push_config, get_push_config, list_push_configs and
// delete_push_config. The contract is narrowed to what the card advertises:
// history_length is offered on every A2A 1.x interface (1.0 dropped
// capabilities.stateTransitionHistory and made historyLength part of every
// send and get) and on a 0.3 one only when its card sets
// stateTransitionHistory; stream and subscribe_task need streaming, the
// push family push notifications. Everything that can be refused is refused before any
// upstream call: bad arguments, an unsatisfiable authorization ("denied
// locally"), a follow-up for a task the TaskRegistry did not record for the
// same tool, server, binding, interface and tenant. Upstream tasks and
// stream events missing required fields are rejected before they reach the
// caller.
//
// A2A has no skill selector in SendMessage, so the adapter says which skill
// it means in the request's top-level metadata, as an adapter-local
// convention: {"chio":{"targetSkillId":…,"targetSkillName":…}}. When the
// partner is a Chio edge (Config.PartnerServerID), the message metadata also
// carries chio.governedIntent, whose call chain extends the caller's.
package a2aadapter
