// Package govtest builds the governance stack the edge tests run against:
// a real embedded NATS server with JetStream (internal/natstest), a tool
// registry with the test's servers, a policy trusting the test's issuers,
// a kernel and a dispatcher over them, and capability tokens to present.
// Nothing is mocked: the edges under test record their decisions and
// outcomes in JetStream as they do in production.
//
// It imports only the layers below the edges (kernel, dispatch, tools,
// schemas), so any edge's tests may use it without an import cycle.
package govtest

import (
	"context"
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/internal/natstest"
	"github.com/chio-ledger/chio/schemas"
)

// Env is one governed stack; its parts close when the test ends.
type Env struct {
	JS       jetstream.JetStream
	Registry *tools.Registry
	Policy   *kernel.LoadedPolicy
	Kernel   *kernel.Kernel
	Dispatch *dispatch.Dispatcher
}

type config struct {
	ns      *natsembed.Server
	servers []tools.Server
	issuers []string
	policy  *kernel.LoadedPolicy
	edgeID  string
}

// Option configures New.
type Option func(*config)

// WithServers registers the tool servers, in order.
func WithServers(s ...tools.Server) Option {
	return func(c *config) { c.servers = append(c.servers, s...) }
}

// WithIssuers makes the policy trust capabilities these keys issue.
func WithIssuers(keys ...ed25519.PrivateKey) Option {
	return func(c *config) {
		for _, k := range keys {
			c.issuers = append(c.issuers, Pub(k))
		}
	}
}

// WithPolicy uses p instead of a policy built from WithIssuers, so that
// replicas of one test can share it.
func WithPolicy(p *kernel.LoadedPolicy) Option { return func(c *config) { c.policy = p } }

// WithEdgeID names the dispatcher's edge (default "test").
func WithEdgeID(id string) Option { return func(c *config) { c.edgeID = id } }

// On connects to ns, a server the test already runs (replicas of one
// cluster), instead of starting a new one.
func On(ns *natsembed.Server) Option { return func(c *config) { c.ns = ns } }

// New starts NATS (unless On), registers the servers and builds the
// policy, kernel and dispatcher, failing t on any error.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	c := config{edgeID: "test"}
	for _, o := range opts {
		o(&c)
	}
	var js jetstream.JetStream
	if c.ns != nil {
		_, js = natstest.Connect(t, c.ns)
	} else {
		_, _, js = natstest.Start(t)
	}
	reg := tools.NewRegistry()
	for _, s := range c.servers {
		if err := reg.Register(s); err != nil {
			t.Fatal(err)
		}
	}
	policy := c.policy
	if policy == nil {
		policy = Policy(t, c.issuers...)
	}
	ctx := context.Background()
	k, err := kernel.New(ctx, js, policy, kernel.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(k.Close)
	d, err := dispatch.New(ctx, js, k, reg, c.edgeID, 1)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{JS: js, Registry: reg, Policy: policy, Kernel: k, Dispatch: d}
}

// Policy is a policy trusting the issuers' public keys (as Pub encodes them).
func Policy(t testing.TB, issuers ...string) *kernel.LoadedPolicy {
	t.Helper()
	p, err := kernel.NewPolicy(kernel.Policy{TrustedIssuers: issuers})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Pub is k's public key as capabilities name it.
func Pub(k ed25519.PrivateKey) string {
	return schemas.EncodePublicKey(k.Public().(ed25519.PublicKey))
}

// Invoke grants invoking tool ("*" for every tool) of server.
func Invoke(server, tool string) schemas.ToolGrant {
	return schemas.ToolGrant{ServerID: server, ToolName: tool, Operations: []schemas.Operation{schemas.OpInvoke}}
}

// AllOf grants invoking every tool of each server (nil for none).
func AllOf(servers ...string) []schemas.ToolGrant {
	var grants []schemas.ToolGrant
	for _, s := range servers {
		grants = append(grants, Invoke(s, "*"))
	}
	return grants
}

// Token is the header form of a capability with id that issuer grants
// subject, valid from..until.
func Token(t testing.TB, issuer, subject ed25519.PrivateKey, id string, from, until time.Time, grants ...schemas.ToolGrant) string {
	t.Helper()
	tok, err := schemas.IssueCapability(issuer, schemas.CapabilityBody{ID: id, Issuer: Pub(issuer), Subject: Pub(subject),
		Scope: schemas.Scope{Grants: grants}, IssuedAt: uint64(from.Unix()), ExpiresAt: uint64(until.Unix())})
	if err != nil {
		t.Fatal(err)
	}
	h, err := schemas.EncodeCapabilityHeader(tok)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Valid is Token valid from a minute ago for an hour.
func Valid(t testing.TB, issuer, subject ed25519.PrivateKey, id string, grants ...schemas.ToolGrant) string {
	t.Helper()
	now := time.Now()
	return Token(t, issuer, subject, id, now.Add(-time.Minute), now.Add(time.Hour), grants...)
}
