package acp

import (
	"slices"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// regKey identifies the registry state a capability table was built from:
// its servers' manifests, in server id order. Register and Replace each
// store a fresh copy of a manifest, so the key changes exactly when a
// server's tools may have.
type regKey []*schemas.ToolManifest

// keyOf is the key of servers (tools.Registry.Servers).
func keyOf(servers []tools.ServerInfo) regKey {
	k := make(regKey, len(servers))
	for i, s := range servers {
		k[i] = s.Manifest
	}
	return k
}

// matches reports whether servers are the state k was taken from.
func (k regKey) matches(servers []tools.ServerInfo) bool {
	return slices.EqualFunc(k, servers, func(m *schemas.ToolManifest, s tools.ServerInfo) bool { return m == s.Manifest })
}
