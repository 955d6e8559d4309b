package mcpbridge

import "github.com/chio-ledger/chio/edges/tools"

// Origin tells a registry listing that these tools come from a wrapped\ MCP\ server.
func (s *Server) Origin() tools.Origin { return tools.OriginMCP }
