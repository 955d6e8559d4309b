package dispatch

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/edges/tools/hello"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/nats-io/nats.go/jetstream"
)

// versionedServer is hello under a manifest version that can change, as
// an upstream's tool list does.
type versionedServer struct {
	*hello.Server
	version string
}

func (s *versionedServer) Manifest() *schemas.ToolManifest {
	m := *s.Server.Manifest()
	m.Version = s.version
	return &m
}

// Each decision event names the signed manifest its tool was resolved
// under, and after Replace the new one.
func TestDecisionNamesTheManifest(t *testing.T) {
	_, _, js := natstest.Start(t)
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	signer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry(tools.WithManifestKey(signer))
	srv := &versionedServer{Server: hello.New(), version: "1"}
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, h := governedBy(t, js, reg, policy, issuer, agent, "cap-manifest")
	f := &fixture{js: js}

	var hashes []string
	for _, version := range []string{"1", "2"} {
		if version != srv.version {
			srv.version = version
			if err := reg.Replace(srv); err != nil {
				t.Fatal(err)
			}
		}
		en, _ := reg.Tool(hello.ServerID, "hello_task")
		res, err := d.Do(ctx, Call{Token: h, ServerID: hello.ServerID, ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"x"}`),
			Metadata: map[string]any{"manifest": "an edge cannot name one"}})
		if err != nil || !res.Decision.Allow {
			t.Fatalf("call: %v %+v", err, res)
		}
		var dec schemas.DecisionEvent
		decs := f.events(t)[schemas.SubjectDecision]
		if err := json.Unmarshal(decs[len(decs)-1], &dec); err != nil {
			t.Fatal(err)
		}
		var meta struct {
			Manifest struct {
				Hash      string `json:"hash"`
				SignerKey string `json:"signer_key"`
			} `json:"manifest"`
		}
		if err := json.Unmarshal(dec.Metadata, &meta); err != nil || meta.Manifest.Hash != en.Signed.ManifestHash ||
			meta.Manifest.SignerKey != schemas.EncodePublicKey(signer.Public().(ed25519.PublicKey)) {
			t.Fatalf("version %s: metadata %s, want hash %s", version, dec.Metadata, en.Signed.ManifestHash)
		}
		hashes = append(hashes, meta.Manifest.Hash)
	}
	if hashes[0] == hashes[1] {
		t.Fatal("a replaced manifest kept its hash")
	}
}

// flippingServer is hello whose tools are deny-by-default or not, as an
// upstream changing its annotations would make them.
type flippingServer struct {
	*hello.Server
	denyByDefault atomic.Bool
}

func (s *flippingServer) Manifest() *schemas.ToolManifest {
	m := *s.Server.Manifest()
	m.Tools = slices.Clone(m.Tools)
	for i := range m.Tools {
		md := maps.Clone(m.Tools[i].Metadata)
		if md == nil {
			md = map[string]json.RawMessage{}
		}
		md[tools.MetaDenyByDefault] = json.RawMessage(strconv.FormatBool(s.denyByDefault.Load()))
		m.Tools[i].Metadata = md
	}
	return &m
}

// With Replace racing the calls, each receipt names the manifest its
// decision followed: a wildcard grant is allowed only under the manifest
// where the tool is not deny-by-default, and denied only under the other.
func TestDecisionManifestRacesReplace(t *testing.T) {
	_, _, js := natstest.Start(t)
	issuer := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, 32))
	agent := ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, 32))
	policy, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: []string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}})
	if err != nil {
		t.Fatal(err)
	}
	reg := tools.NewRegistry()
	srv := &flippingServer{Server: hello.New()}
	if err := reg.Register(srv); err != nil {
		t.Fatal(err)
	}
	hashOf := map[bool]string{} // deny-by-default → manifest hash
	for _, dbd := range []bool{true, false} {
		srv.denyByDefault.Store(dbd)
		if err := reg.Replace(srv); err != nil {
			t.Fatal(err)
		}
		en, _ := reg.Tool(hello.ServerID, "hello_task")
		hashOf[dbd] = en.Signed.ManifestHash
	}
	if hashOf[true] == hashOf[false] {
		t.Fatal("the two manifests have one hash")
	}
	ctx := context.Background()
	d, h := governedBy(t, js, reg, policy, issuer, agent, "cap-race")

	stop := make(chan struct{})
	flipped := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				flipped <- nil
				return
			default:
			}
			srv.denyByDefault.Store(!srv.denyByDefault.Load())
			if err := reg.Replace(srv); err != nil {
				flipped <- err
				return
			}
		}
	}()
	const calls = 200
	for i := range calls {
		if _, err := d.Do(ctx, Call{Token: h, ServerID: hello.ServerID, ToolName: "hello_task", Arguments: json.RawMessage(`{"text":"x"}`)}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	close(stop)
	if err := <-flipped; err != nil {
		t.Fatal(err)
	}
	decs := (&fixture{js: js}).events(t)[schemas.SubjectDecision]
	if len(decs) != calls {
		t.Fatalf("%d decision events, want %d", len(decs), calls)
	}
	for _, raw := range decs {
		var dec schemas.DecisionEvent
		var meta struct {
			Manifest struct {
				Hash string `json:"hash"`
			} `json:"manifest"`
		}
		if err := json.Unmarshal(raw, &dec); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(dec.Metadata, &meta); err != nil {
			t.Fatal(err)
		}
		allowed := dec.Decision.Verdict == schemas.VerdictAllow
		if want := hashOf[!allowed]; meta.Manifest.Hash != want {
			t.Fatalf("receipt %s (%s): manifest %s, want %s, the one its decision followed", dec.ReceiptID, dec.Decision.Verdict, meta.Manifest.Hash, want)
		}
	}
}

// governedBy is a kernel over reg and policy, its dispatcher, and a token
// (capID) of issuer for agent granting every tool of the demo server.
func governedBy(t *testing.T, js jetstream.JetStream, reg *tools.Registry, policy *kernel.LoadedPolicy, issuer, agent ed25519.PrivateKey, capID string) (*Dispatcher, string) {
	t.Helper()
	ctx := context.Background()
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := New(ctx, js, k, reg, "edge-test", 1)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{
		ID: capID, Issuer: schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)),
		Subject:  schemas.EncodePublicKey(agent.Public().(ed25519.PublicKey)),
		Scope:    schemas.Scope{Grants: []schemas.ToolGrant{{ServerID: hello.ServerID, ToolName: "*", Operations: []schemas.Operation{schemas.OpInvoke}}}},
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(time.Hour).Unix()),
	})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return d, h
}
