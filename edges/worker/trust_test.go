package worker

import (
	"context"
	"crypto/ed25519"
	"slices"
	"testing"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// renamed is the hello server under another id, with its manifest's
// policy fields chosen by the test.
type renamed struct {
	*hello.Server
	id      string
	mutate  func(*schemas.ToolManifest)
	toolIDs []string
}

func (s *renamed) ServerID() string { return s.id }

func (s *renamed) ToolNames() []string {
	if s.toolIDs != nil {
		return s.toolIDs
	}
	return s.Server.ToolNames()
}

func (s *renamed) Manifest() *schemas.ToolManifest {
	m := s.Server.Manifest()
	m.ServerID = s.id
	if s.mutate != nil {
		s.mutate(m)
	}
	return m
}

// TestDiscoverTrustAndConflicts: an edge registers only servers whose
// manifest its pinned key signed, and a bad worker (another key, an id
// the edge already holds with other tools) is skipped without keeping the
// good ones out.
func TestDiscoverTrustAndConflicts(t *testing.T) {
	described := func(m *schemas.ToolManifest) { m.Description = "rogue" }
	otherTool := func(m *schemas.ToolManifest) { m.Tools[0].Name = "other_tool" }
	cases := []struct {
		name  string
		rogue func(t *testing.T, ns *natsembed.Server)
		held  tools.Server // registered on the edge before discovery
		want  []string     // server ids registered by discovery
	}{
		{
			name: "rogue key claims a server id",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, rogueKey(), &renamed{Server: hello.New(), id: "payments", mutate: described})
			},
			want: []string{hello.ServerID},
		},
		{
			name: "rogue key serves the legitimate id",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, rogueKey(), &renamed{Server: hello.New(), id: "shadow"})
			},
			want: []string{hello.ServerID},
		},
		{
			name: "id held with other tools",
			rogue: func(t *testing.T, ns *natsembed.Server) {
				startWorkerKey(t, ns, workerKey(), &renamed{Server: hello.New(), id: "held", mutate: otherTool, toolIDs: []string{"other_tool"}})
			},
			held: &renamed{Server: hello.New(), id: "held"},
			want: []string{hello.ServerID},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns, _, _ := natstest.Start(t)
			tc.rogue(t, ns)
			startWorker(t, ns, hello.New())
			nc, _ := natstest.Connect(t, ns)
			reg := tools.NewRegistry()
			if tc.held != nil {
				if err := reg.Register(tc.held); err != nil {
					t.Fatal(err)
				}
			}
			added, _, err := Register(context.Background(), nc, reg, WithLogger(quiet()), trusted())
			if err != nil {
				t.Fatalf("register: %v", err)
			}
			var got []string
			for _, r := range added {
				got = append(got, r.ServerID())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("registered %v, want %v", got, tc.want)
			}
			if _, ok := reg.Tool("payments", hello.ToolName); ok {
				t.Fatal("a rogue worker's server is registered")
			}
		})
	}
}

// TestDiscoverNeedsKey: without a pinned key nothing is trusted.
func TestDiscoverNeedsKey(t *testing.T) {
	ns, _, _ := natstest.Start(t)
	startWorker(t, ns, hello.New())
	nc, _ := natstest.Connect(t, ns)
	if _, err := Discover(context.Background(), nc, WithLogger(quiet())); err == nil {
		t.Fatal("discovery without a worker key succeeded")
	}
	if _, err := Serve(nc, []tools.Server{hello.New()}, WithWorkerLogger(quiet())); err == nil {
		t.Fatal("a worker without a manifest key started")
	}
}

// startWorkerKey serves servers signed with key on a connection of its own.
func startWorkerKey(t *testing.T, ns *natsembed.Server, key ed25519.PrivateKey, servers ...tools.Server) {
	t.Helper()
	nc, _ := natstest.Connect(t, ns)
	w, err := Serve(nc, servers, WithWorkerLogger(quiet()), WithManifestKey(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop() })
}
