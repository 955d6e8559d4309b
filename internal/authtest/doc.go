// Package authtest is test infrastructure for code that authenticates to
// partners: a test CA that issues a server and a client certificate (PKI),
// and a test OpenID provider, zitadel's example provider over TLS with one
// client-credentials client that gets JWT access tokens (OP).
package authtest
