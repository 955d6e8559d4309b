package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
)

// oidcFlags add identity providers to the policy from the command line,
// for quick starts: every --oidc-issuer shares the --oidc-audience values
// and the --oidc-grant rules. A policy file's identity_providers is the
// full form (one provider's audiences, algorithms, skew and rules each).
type oidcFlags struct {
	issuers   []string
	audiences []string
	grants    []string
	caFile    string
}

func (f *oidcFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.issuers, "oidc-issuer", nil, "trust JWT access tokens of this OpenID provider (issuer URL; repeatable), with --oidc-audience and --oidc-grant")
	fs.StringArrayVar(&f.audiences, "oidc-audience", nil, "an audience the providers' tokens must name (repeatable; at least one with --oidc-issuer)")
	fs.StringArrayVar(&f.grants, "oidc-grant", nil, `grant tokens whose claim has a value a tool: 'CLAIM=VALUE:SERVER/TOOL[:OPS]' (OPS comma-separated, default invoke; TOOL may be *), e.g. 'sub=agent-7:hello-a2a-srv/*' (repeatable; grants of one CLAIM=VALUE add up)`)
	fs.StringVar(&f.caFile, "oidc-ca", "", "PEM file of CA certificates to trust for the identity providers' discovery and keys, beside the system's")
}

// providers are the flags' providers, nil without --oidc-issuer.
func (f *oidcFlags) providers() ([]identity.Provider, error) {
	if len(f.issuers) == 0 {
		if len(f.audiences) > 0 || len(f.grants) > 0 {
			return nil, usageError(errors.New("--oidc-audience and --oidc-grant need --oidc-issuer"))
		}
		return nil, nil
	}
	var rules []identity.Rule
	at := map[string]int{} // CLAIM=VALUE → its rule
	for _, g := range f.grants {
		match, target, ok := strings.Cut(g, ":")
		claim, value, okm := strings.Cut(match, "=")
		if !ok || !okm || claim == "" || value == "" {
			return nil, usageError(fmt.Errorf("--oidc-grant %q: want CLAIM=VALUE:SERVER/TOOL[:OPS]", g))
		}
		target, opsText, _ := strings.Cut(target, ":")
		server, tool, ok := strings.Cut(target, "/")
		if !ok || server == "" || tool == "" {
			return nil, usageError(fmt.Errorf("--oidc-grant %q: want SERVER/TOOL after the colon", g))
		}
		ops := []schemas.Operation{schemas.OpInvoke}
		if opsText != "" {
			ops = nil
			for _, o := range strings.Split(opsText, ",") {
				ops = append(ops, schemas.Operation(o))
			}
		}
		grant := schemas.ToolGrant{ServerID: server, ToolName: tool, Operations: ops}
		i, seen := at[match]
		if !seen {
			i = len(rules)
			at[match] = i
			rules = append(rules, identity.Rule{Match: map[string]string{claim: value}})
		}
		rules[i].Grants = append(rules[i].Grants, grant)
	}
	var out []identity.Provider
	for _, iss := range f.issuers {
		p := identity.Provider{Issuer: iss, Audiences: f.audiences, Rules: rules}
		if err := p.Validate(); err != nil {
			return nil, usageError(fmt.Errorf("--oidc-issuer %s: %w", iss, err))
		}
		out = append(out, p)
	}
	return out, nil
}

// withProviders is policy with the flags' providers added (a new policy,
// so its hash covers them).
func (f *oidcFlags) withProviders(policy *kernel.LoadedPolicy) (*kernel.LoadedPolicy, error) {
	ps, err := f.providers()
	if err != nil || ps == nil {
		return policy, err
	}
	p := policy.Policy
	p.IdentityProviders = append(append([]identity.Provider(nil), p.IdentityProviders...), ps...)
	out, err := kernel.NewPolicy(p)
	if err != nil {
		return nil, usageError(fmt.Errorf("--oidc-issuer: %w", err))
	}
	return out, nil
}

// client is the HTTP client for the providers, nil for the default.
func (f *oidcFlags) client() (*http.Client, error) {
	if f.caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(f.caFile)
	if err != nil {
		return nil, usageError(fmt.Errorf("--oidc-ca: %w", err))
	}
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if !roots.AppendCertsFromPEM(pem) {
		return nil, usageError(fmt.Errorf("--oidc-ca %s: no PEM certificate in it", f.caFile))
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment,
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}}, nil
}

// verifier verifies the access tokens of policy's identity providers for
// the read APIs, nil when it names none.
func (f *oidcFlags) verifier(policy *kernel.LoadedPolicy) (*identity.Verifier, error) {
	if len(policy.IdentityProviders) == 0 {
		return nil, nil
	}
	var opts []identity.Option
	c, err := f.client()
	if err != nil {
		return nil, err
	}
	if c != nil {
		opts = append(opts, identity.WithHTTPClient(c))
	}
	return identity.New(policy.IdentityProviders, opts...)
}
