package a2aadapter

import "github.com/chio-ledger/chio/edges/tools"

// Origin tells a registry listing that these tools come from a partner\ A2A\ agent.
func (a *Adapter) Origin() tools.Origin { return tools.OriginA2A }
