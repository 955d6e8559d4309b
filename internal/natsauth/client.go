package natsauth

import (
	"bytes"
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Client is how a command authenticates to NATS and checks the server:
// NATS's own forms, one of creds (a JWT and its nkey seed), an nkey seed,
// or a user and password, plus TLS (a CA to trust, and a client
// certificate for mutual TLS).
type Client struct {
	Creds        string // decorated JWT + seed file (nsc's .creds)
	Nkey         string // nkey seed file
	User         string
	PasswordFile string
	TLSCA        string
	TLSCert      string
	TLSKey       string
}

// Options are the nats.go options of a connection acting as role r. With
// no credential given, the connection is anonymous (a server without
// authorization, as in tests and a bare nats-server).
func (c Client) Options(r Role) ([]nats.Option, error) {
	opts := []nats.Option{nats.CustomInboxPrefix(r.InboxPrefix())}
	n := 0
	for _, set := range []bool{c.Creds != "", c.Nkey != "", c.User != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return nil, errors.New("give one NATS credential: --nats-creds, --nats-nkey or --nats-user")
	}
	switch {
	case c.Creds != "":
		if _, err := os.Stat(c.Creds); err != nil {
			return nil, fmt.Errorf("--nats-creds: %w", err)
		}
		opts = append(opts, nats.UserCredentials(c.Creds))
	case c.Nkey != "":
		raw, err := os.ReadFile(c.Nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		kp, err := parseSeed(c.Nkey, raw)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		pub, _ := kp.PublicKey()
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	case c.User != "":
		if c.PasswordFile == "" {
			return nil, errors.New("--nats-user needs --nats-password-file")
		}
		raw, err := os.ReadFile(c.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("--nats-password-file: %w", err)
		}
		opts = append(opts, nats.UserInfo(c.User, string(bytes.TrimRight(raw, "\r\n"))))
	case c.PasswordFile != "":
		return nil, errors.New("--nats-password-file needs --nats-user")
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return nil, errors.New("--nats-tls-cert and --nats-tls-key go together")
	}
	if c.TLSCA != "" {
		if _, err := os.Stat(c.TLSCA); err != nil {
			return nil, fmt.Errorf("--nats-tls-ca: %w", err)
		}
		opts = append(opts, nats.RootCAs(c.TLSCA))
	}
	if c.TLSCert != "" {
		for _, f := range []string{c.TLSCert, c.TLSKey} {
			if _, err := os.Stat(f); err != nil {
				return nil, fmt.Errorf("--nats-tls-cert/--nats-tls-key: %w", err)
			}
		}
		opts = append(opts, nats.ClientCert(c.TLSCert, c.TLSKey))
	}
	return opts, nil
}
