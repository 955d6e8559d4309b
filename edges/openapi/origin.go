package openapi

import "github.com/chio-ledger/chio/edges/tools"

// Origin tells a registry listing that these tools come from a HTTP\ API\ bridged\ from\ its\ OpenAPI\ spec.
func (s *Server) Origin() tools.Origin { return tools.OriginOpenAPI }
