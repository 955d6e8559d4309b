package a2a

import (
	"encoding/json"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/schemas"
)

// execRequest is a task's execution request as stored with it: what runs,
// never who asked (the caller's capability is presented again by whoever
// executes it, and must be the task's owner).
type execRequest struct {
	ServerID  string          `json:"server_id"`
	ToolName  string          `json:"tool_name"`
	Arguments json.RawMessage `json:"arguments"`
	Stream    bool            `json:"stream,omitempty"`
	// Native marks an A2A-native tool (tools.MetaA2ANative): its chunks
	// are A2A events that drive the task.
	Native bool   `json:"native,omitempty"`
	Mode   string `json:"mode"`
	// Capability is kept only for background tasks: a replica that takes
	// over a task whose accepting replica died must decide under the
	// caller's own authority, which it cannot otherwise present. The task
	// stream is as protected as the KV buckets (same NATS account).
	Capability string `json:"capability,omitempty"`
	// RequestID is the call's request id: the messageId of the message
	// that started the turn. A relayed call names it as its parent.
	RequestID string `json:"request_id,omitempty"`
	// Intent is the governed intent the caller sent under
	// metadata.chio.governedIntent, checked by the kernel at execution.
	Intent *schemas.GovernedIntent `json:"governed_intent,omitempty"`
}

// Lifecycle modes recorded in metadata.chio.lifecycle.
const (
	modeBlocking   = "blocking"
	modeBackground = "return_immediately"
	modeDeferred   = "deferred"
	modeStreaming  = "streaming"
)

// chioMeta is metadata.chio of a task: the receipt it bears and how it got it.
func chioMeta(res *dispatch.Result, mode string, pending bool, failure string) map[string]any {
	m := map[string]any{
		"authorityPath": "cross_protocol_orchestrator", "authoritative": true, "compatibilityOnly": false,
		"receiptBearing": res != nil, "receiptPending": pending, "claimEligible": false,
		"receiptId": nil, "lifecycle": map[string]any{"protocol": "a2a", "mode": mode},
	}
	if res != nil {
		d := res.Decision
		m["receiptId"] = res.ReceiptID
		m["capabilityId"] = d.CapabilityID
		m["decision"] = string(d.Verdict().Verdict)
		m["policyHash"] = d.PolicyHash
		m["claimEligible"] = d.Allow && res.Outcome == schemas.OutcomeCompleted
		if !d.Allow {
			m["denyGuard"], m["denyReason"] = d.Guard, d.Reason
		}
		if res.Ran {
			m["outcome"] = string(res.Outcome)
		}
	}
	if failure != "" {
		m["failure"] = failure
	}
	return map[string]any{"chio": m}
}

// mustJSON encodes values built in this package from strings, bools and
// maps of them, which cannot fail to encode.
func mustJSON(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// agentMessage is a status message from the agent.
func agentMessage(t *taskstore.Task, parts []wire.Part) *wire.Message {
	return &wire.Message{MessageID: uuid.Must(uuid.NewV7()).String(), ContextID: t.ContextID, TaskID: t.ID, Role: wire.RoleAgent, Parts: parts}
}

// storedDialect is the dialect of the messages and artifacts stored with
// a task: 1.0, whatever the dialect of the request that wrote them.
var storedDialect = wire.DialectOf(wire.V10)

func encodeStored(m *wire.Message) (json.RawMessage, error) { return storedDialect.EncodeMessage(m) }
