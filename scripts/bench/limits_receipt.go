package main

import (
	"crypto/ed25519"
	"encoding/json"
	"fmt"

	"github.com/chio-ledger/chio/schemas"
)

// limitsReceiptBody returns the unsigned body of receipt i as the ledger builds
// it from an edge's decision and outcome events (ledger/fold.go
// bodyFromOutcome): an A2A message/send call through the kernel's guard
// pipeline, with the attribution metadata the dispatcher adds. Every fourth
// call is denied by a guard, as a denial is receipted too. Sizes are those
// of a short real call: the leaf is about 1 KB.
func limitsReceiptBody(id string, i int, ts uint64) schemas.ReceiptBody {
	params := fmt.Sprintf(`{"message":{"kind":"message","messageId":"%s","parts":[{"kind":"text","text":"Summarise the open invoices for account %d and flag any overdue by more than 30 days."}],"role":"user"},"metadata":{}}`, id, 10000+i%9000)
	b := schemas.ReceiptBody{
		ID: id, Timestamp: ts, CapabilityID: fmt.Sprintf("cap-%04d", i%64),
		ToolServer: "billing-agent", ToolName: "message/send",
		Action:      schemas.ToolCallAction{Parameters: json.RawMessage(params)},
		Decision:    schemas.Decision{Verdict: schemas.VerdictAllow},
		ContentHash: schemas.SHA256Hex(fmt.Appendf(nil, "output %d", i)),
		PolicyHash:  schemas.SHA256Hex([]byte("policy v1")),
		Evidence: []schemas.GuardEvidence{
			{GuardName: "CapabilityGuard", Verdict: true},
			{GuardName: "RateLimitGuard", Verdict: true},
			{GuardName: "PIIGuard", Verdict: true},
		},
		Metadata:   json.RawMessage(fmt.Sprintf(`{"attribution":{"root_subject":"spiffe://example.org/ns/finance/sa/orchestrator","subject":"spiffe://example.org/ns/finance/sa/agent-%d"}}`, i%16)),
		TrustLevel: schemas.TrustMediated,
	}
	if i%4 == 3 {
		b.Decision = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "tool not granted by the capability", Guard: "grant"}
		b.Evidence[2] = schemas.GuardEvidence{GuardName: "PIIGuard", Verdict: false, Details: "tool not granted by the capability"}
		b.ContentHash = schemas.EmptyContentHash
	}
	return b
}

// limitsSampleReceipt signs one representative receipt with the ledger's own
// signing path (schemas.SignReceiptLeaf, as ledger.signAll does) and
// returns the log leaf (the signed receipt's JCS) and the exact bytes
// Ed25519 signed (the JCS of the body).
func limitsSampleReceipt(key ed25519.PrivateKey) (leaf, signed []byte, err error) {
	leaf, err = schemas.SignReceiptLeaf(key, limitsReceiptBody("0198a0c4-5b7e-7c3a-9f21-3d4e5f607182", 0, 1767225600))
	if err != nil {
		return nil, nil, fmt.Errorf("sign sample receipt: %w", err)
	}
	r, err := schemas.ParseReceipt(leaf)
	if err != nil {
		return nil, nil, fmt.Errorf("parse sample receipt: %w", err)
	}
	if signed, err = r.ReceiptBody.SigningBytes(); err != nil {
		return nil, nil, fmt.Errorf("sample receipt signing bytes: %w", err)
	}
	if err := r.Verify(); err != nil {
		return nil, nil, fmt.Errorf("verify sample receipt: %w", err)
	}
	return leaf, signed, nil
}
