package a2aadapter

import (
	"errors"

	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// ErrNoGovernance: a call to a Chio partner came without the governance
// context its call chain is built from.
var ErrNoGovernance = errors.New("the call carries no governance context (request, receipt, subject); refusing to call without a chain")

// NextIntent is the governed intent of a call that the governed call g
// makes to serverID/toolName: g becomes the parent, the chain id and origin
// carry over from g's own chain, and g's subject is the delegator. A call
// that came without a chain starts one rooted at it. The chain is extended,
// never replaced nor re-signed, so the partner's receipt shows every hop.
// purpose applies when g declared no intent of its own.
//
// This is the chain logic of the relay demo (edges/tools/relay), shared
// here so that every hop that calls another agent extends chains alike.
func NextIntent(g *tools.Governance, serverID, toolName, purpose string) (*schemas.GovernedIntent, error) {
	if g == nil || g.RequestID == "" || g.ReceiptID == "" || g.Subject == "" {
		return nil, ErrNoGovernance
	}
	next := &schemas.GovernedIntent{ID: uuid.Must(uuid.NewV7()).String(), ServerID: serverID, ToolName: toolName, Purpose: purpose}
	chain := &schemas.CallChain{ChainID: g.ReceiptID, ParentRequestID: g.RequestID, ParentReceiptID: g.ReceiptID,
		OriginSubject: g.Subject, DelegatorSubject: g.Subject}
	if in := g.Intent; in != nil {
		next.Purpose, next.MaxAmount = in.Purpose, in.MaxAmount
		if c := in.CallChain; c != nil {
			chain.ChainID, chain.OriginSubject = c.ChainID, c.OriginSubject
		}
	}
	next.CallChain = chain
	return next, nil
}
