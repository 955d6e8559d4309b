package tools

import (
	"slices"

	"github.com/chio-ledger/chio/schemas"
)

// Version identifies the registry state a tool set was built from: its
// servers' manifests, in server id order. Register and Replace each store
// a fresh copy of a manifest, so the version changes exactly when a
// server's tools may have, and an edge that keeps a table of its exposed
// tools rebuilds it only then.
type Version []*schemas.ToolManifest

// VersionOf is the version of servers (Registry.Servers).
func VersionOf(servers []ServerInfo) Version {
	v := make(Version, len(servers))
	for i, s := range servers {
		v[i] = s.Manifest
	}
	return v
}

// Matches reports whether servers are the state v was taken from.
func (v Version) Matches(servers []ServerInfo) bool {
	return slices.EqualFunc(v, servers, func(m *schemas.ToolManifest, s ServerInfo) bool { return m == s.Manifest })
}
