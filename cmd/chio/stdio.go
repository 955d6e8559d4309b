package main

import (
	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/internal/natsauth"
)

// stdioFlags are the flags of a command that serves either HTTP or one
// session on stdin/stdout. They are registered in one place so each such
// command names, defaults and documents them alike.
type stdioFlags struct {
	natsURL, dataDir, token string
	stdio                   bool
}

// register adds --nats, --stdio, --token and --data-dir. serves is what
// --stdio serves ("MCP", "the profile"); modes is the flags under which
// --token and --data-dir apply ("--stdio", "--stdio or --proxy").
func (s *stdioFlags) register(f *pflag.FlagSet, serves, modes string) {
	f.StringVar(&s.natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+"; with --stdio, an embedded server in --data-dir)")
	f.BoolVar(&s.stdio, "stdio", false, "serve "+serves+" on stdin/stdout (newline-delimited JSON-RPC)")
	f.StringVar(&s.token, "token", "", "with "+modes+": the capability every call acts under, or @FILE (default: a dev capability from --data-dir)")
	f.StringVar(&s.dataDir, "data-dir", ".chio", "with "+modes+": keys and the embedded NATS store")
}

// capability is the token every stdio call acts under (empty over HTTP).
func (s *stdioFlags) capability(ef *edgeFlags) (string, error) {
	return stdioCapability(ef, s.stdio, s.dataDir, s.token)
}

// connect reaches --nats, or an embedded server when serving stdio.
func (s *stdioFlags) connect(name string, auth *natsauth.Client) (*standalone, error) {
	return connectStandalone(s.natsURL, s.dataDir, name, s.stdio, auth)
}
