package proxy

import (
	"context"
	"io"
	"path/filepath"
	"testing"

	"github.com/coder/acp-go-sdk"

	"github.com/chio-ledger/chio/internal/acptest"
)

// BenchmarkReadTextFile is one fs/read_text_file of a small file, from an
// agent to an editor (both the official SDK over pipes): directly, and
// through the proxy as a governed call (kernel, durable decision, the
// editor, durable outcome) on embedded JetStream with file storage.
func BenchmarkReadTextFile(b *testing.B) {
	f := start(b, nil, grant("*"))
	path := filepath.Join(f.root, "a.txt")
	run := func(b *testing.B, agent *acp.AgentSideConnection) {
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			r, err := agent.ReadTextFile(ctx, acp.ReadTextFileRequest{SessionId: "sess-1", Path: path})
			if err != nil || r.Content != "alpha" {
				b.Fatalf("%q %v", r.Content, err)
			}
		}
	}
	b.Run("direct", func(b *testing.B) {
		edR, agW := io.Pipe()
		agR, edW := io.Pipe()
		ed := &acptest.Editor{Root: f.root}
		ed.Connect(edW, edR).SetLogger(quiet)
		ag := (&acptest.Agent{}).Serve(agW, agR)
		ag.SetLogger(quiet)
		run(b, ag)
		agW.Close()
		edW.Close()
	})
	b.Run("proxy", func(b *testing.B) {
		edR, edW := io.Pipe()
		peR, peW := io.Pipe()
		paR, paW := io.Pipe()
		apR, apW := io.Pipe()
		ed := &acptest.Editor{Root: f.root}
		ed.Connect(edW, peR).SetLogger(quiet)
		ag := (&acptest.Agent{}).Serve(apW, paR)
		ag.SetLogger(quiet)
		served := make(chan error, 1)
		go func() { served <- f.proxy.Serve(context.Background(), edR, peW, paW, apR) }()
		run(b, ag)
		apW.Close()
		<-served
		edW.Close()
	})
}
