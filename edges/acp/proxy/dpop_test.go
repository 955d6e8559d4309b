package proxy

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/acptest"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

var helperKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{3}, 32))

// delegating grants every "acp" tool with invoke and delegate.
func delegating() schemas.ToolGrant {
	g := grant("*")
	g.Operations = append(g.Operations, schemas.OpDelegate)
	return g
}

func signerOf(t *testing.T, key ed25519.PrivateKey, token string) *dpop.Signer {
	t.Helper()
	s, err := dpop.NewSigner(key, token)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A capability that can delegate is honoured only with a proof of
// possession, which the proxy makes per call: without its subject's key
// the proxy does not start. A helper holding a delegated token cannot run
// the proxy under its rebuilt parent: it has no key to sign for it.
func TestProxyNeedsTheSubjectKey(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token(t, delegating())
	if _, err := e.proxy(tok, WithLogger(quiet)); err == nil || !strings.Contains(err.Error(), "needs a proof of possession") ||
		!strings.Contains(err.Error(), "WithSigner") {
		t.Fatalf("no signer: %v", err)
	}
	leaf := e.token(t, grant("*"))
	if _, err := e.proxy(tok, WithSigner(signerOf(t, agentKey, leaf))); err == nil || !strings.Contains(err.Error(), "signer") {
		t.Fatalf("a signer of another token: %v", err)
	}

	// The helper's chain carries the agent's token, which it rebuilds.
	raw, err := schemas.DecodeCapabilityText(tok)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := schemas.ParseCapability(raw)
	if err != nil {
		t.Fatal(err)
	}
	helper, err := schemas.Delegate(agentKey, parent, schemas.CapabilityBody{ID: "cap-helper", Subject: pub(helperKey),
		Scope: schemas.Scope{Grants: []schemas.ToolGrant{grant(MethodRead)}}, IssuedAt: parent.IssuedAt, ExpiresAt: parent.ExpiresAt})
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := schemas.EncodeCapabilityHeader(helper.Ancestor(len(helper.DelegationChain) - 1))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.proxy(rebuilt, WithLogger(quiet)); err == nil || !strings.Contains(err.Error(), "needs a proof of possession") {
		t.Fatalf("the rebuilt parent: %v", err)
	}
	if _, err := dpop.NewSigner(helperKey, rebuilt); err == nil {
		t.Fatal("the helper's key signs for the rebuilt parent")
	}
	if _, err := e.proxy(rebuilt, WithSigner(signerOf(t, helperKey, mustHeader(t, helper)))); err == nil {
		t.Fatal("the proxy ran the rebuilt parent with the helper's signer")
	}
	// The helper's own leaf token runs as is.
	if _, err := e.proxy(mustHeader(t, helper), WithLogger(quiet)); err != nil {
		t.Fatalf("the helper's leaf token: %v", err)
	}
}

func mustHeader(t *testing.T, tok *schemas.CapabilityToken) string {
	t.Helper()
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// With the subject's key, every governed call carries its own tool proof
// (a permission request's too): the session runs, and each receipt
// records the binding chio_dpop_v1 with the agent key's thumbprint; a
// denied call is still denied by its guard, not for its proof.
func TestProxySignsEachCall(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token(t, delegating(), grant(MethodWrite))
	p, err := e.proxy(tok, WithLogger(quiet), WithSigner(signerOf(t, agentKey, tok)))
	if err != nil {
		t.Fatal(err)
	}
	f := e.fixture(t, p)
	s := f.connect(t, &acptest.Editor{})
	a, b := filepath.Join(f.root, "a.txt"), filepath.Join(f.root, "b.txt")
	got := s.run(t, "read "+a, "write "+b+" hi", "read /etc/passwd", "ask edit Modify the config")
	if !strings.HasPrefix(got["read"][0], `ok "alpha"`) || !strings.HasPrefix(got["write"][0], "ok ") || !strings.Contains(got["read"][1], `"code":-32002`) ||
		!strings.HasPrefix(got["ask"][0], "ok selected allow") {
		t.Fatalf("session: %q", got)
	}
	jkt := dpop.Thumbprint(agentKey.Public().(ed25519.PublicKey))
	ds := byTool(t, f.js)
	if len(ds[MethodPermission]) != 1 {
		t.Fatalf("permission decisions %+v", ds[MethodPermission])
	}
	for _, d := range append(append(ds[MethodRead], ds[MethodWrite]...), ds[MethodPermission]...) {
		var m struct {
			Attribution struct {
				Binding map[string]string `json:"binding"`
			} `json:"attribution"`
		}
		if err := json.Unmarshal(d.Metadata, &m); err != nil {
			t.Fatal(err)
		}
		if b := m.Attribution.Binding; b["method"] != dpop.MethodToolProof || b["jkt"] != jkt {
			t.Fatalf("%s %s: binding %v", d.ToolName, d.Decision.Verdict, b)
		}
	}
	if len(ds[MethodRead]) != 2 || ds[MethodRead][1].Decision.Guard != "PathGuard" {
		t.Fatalf("reads %+v", ds[MethodRead])
	}
}

// With the replay state unreachable, a signed call cannot be proven: the
// agent gets CodeInternal (a server condition, to retry), not a denial,
// and the receipt records the refusal at the proof step.
func TestProxyProofStateUnavailable(t *testing.T) {
	e := newEnv(t, nil)
	tok := e.token(t, delegating())
	p, err := e.proxy(tok, WithLogger(quiet), WithSigner(signerOf(t, agentKey, tok)))
	if err != nil {
		t.Fatal(err)
	}
	f := e.fixture(t, p)
	s := f.connect(t, &acptest.Editor{})
	natstest.BreakProofState(t, e.js)
	got := s.run(t, "read "+filepath.Join(f.root, "a.txt"))
	if !strings.Contains(got["read"][0], `"code":-32603`) || !strings.Contains(got["read"][0], string(dpop.CheckState)) {
		t.Fatalf("session: %q", got)
	}
	ds := byTool(t, f.js)[MethodRead]
	if len(ds) != 1 {
		t.Fatalf("read decisions %+v", ds)
	}
	// Allowed, then refused when the claim could not be made.
	o := natstest.Outcomes(t, f.js)[ds[0].ReceiptID]
	if ds[0].Decision.Verdict != schemas.VerdictAllow || o.Outcome != schemas.OutcomeRefused || dpop.CheckOf(o.Reason) != dpop.CheckState {
		t.Fatalf("decision %+v outcome %+v", ds[0].Decision, o)
	}
}
