// Package auth turns an A2A agent card's security requirements and the
// credentials an operator configured for that partner into an *http.Client
// that sends exactly what one declared requirement set asks for.
//
// It fails closed. A requirement set is chosen only when every scheme in it
// can be satisfied; when none can, Authorize returns an error wrapping
// ErrUnsatisfiable before anything is sent. Credentials go only to cards that
// ask for them, never over plain http to a non-loopback host, and never
// across a redirect to another origin. Secrets never appear in errors or in
// the formatted form of the credential types.
package auth
