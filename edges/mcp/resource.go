package mcp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"
)

// MCP authorization (revisions 2025-11-25 and 2026-07-28): the edge is an
// OAuth protected resource. With authorization servers configured
// (WithAuthorizationServers: the policy's identity providers), a 401
// names the resource's metadata document (RFC 9728 section 5.1) in its
// Bearer challenge, and that document, served at
// /.well-known/oauth-protected-resource followed by the resource's path,
// names the authorization servers a client gets its token from. The
// token's audience (RFC 8707's resource) is the policy's to check: name
// this endpoint's URL among the provider's audiences.

// ResourceMetadataPrefix starts the path of a resource's metadata.
const ResourceMetadataPrefix = "/.well-known/oauth-protected-resource"

// WithAuthorizationServers names the issuers whose access tokens the
// kernel takes, for MCP clients to discover.
func WithAuthorizationServers(issuers []string) Option {
	return func(o *options) { o.authServers = issuers }
}

// origin is the origin clients address this edge by.
func (e *Edge) originOf(r *http.Request) string {
	if e.opts.origin != "" {
		return strings.TrimSuffix(e.opts.origin, "/")
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// challenge is a 401's Bearer challenge for r.
func (e *Edge) challenge(r *http.Request) string {
	if len(e.opts.authServers) == 0 {
		return bearerChallenge
	}
	return fmt.Sprintf(`%s, resource_metadata="%s%s%s"`, bearerChallenge, e.originOf(r), ResourceMetadataPrefix, Path)
}

// resourceMetadata serves the RFC 9728 document of the resource at Path.
func (e *Edge) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	doc := map[string]any{
		"resource":                 e.originOf(r) + Path,
		"authorization_servers":    e.opts.authServers,
		"bearer_methods_supported": []string{"header"},
		// Proofs of possession are Ed25519 (RFC 9449 with EdDSA).
		"dpop_signing_alg_values_supported": []string{"EdDSA"},
		"resource_name":                     "chio MCP edge",
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	_ = json.NewEncoder(w).Encode(doc)
}

// registerResource serves the metadata when authorization servers are
// configured: at the path-inserted address, and at the bare one for
// clients that look there first.
func (e *Edge) registerResource(ec *echo.Echo) {
	if len(e.opts.authServers) == 0 {
		return
	}
	h := echo.WrapHandler(http.HandlerFunc(e.resourceMetadata))
	ec.GET(ResourceMetadataPrefix+Path, h)
	ec.GET(ResourceMetadataPrefix, h)
}
