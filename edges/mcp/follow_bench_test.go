package mcp

import "testing"

// BenchmarkTools is what following the registry adds to each tools/list
// and tools/call when nothing changed: one registry read to learn that.
//
//	go test ./edges/mcp -run '^$' -bench Tools
func BenchmarkTools(b *testing.B) {
	f := start(b)
	for b.Loop() {
		if t := f.edge.tools(); len(t.bindings) == 0 {
			b.Fatal("no tools")
		}
	}
}
