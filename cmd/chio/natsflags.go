package main

import (
	"errors"
	"log/slog"

	"github.com/nats-io/nats.go"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/internal/natsauth"
)

// registerNATSAuth declares the NATS credential and TLS flags every
// command that connects to NATS takes: NATS's own forms.
func registerNATSAuth(fs *pflag.FlagSet, c *natsauth.Client) {
	fs.StringVar(&c.Creds, "nats-creds", "", "NATS credentials file (a user JWT and its nkey seed, as nsc writes)")
	fs.StringVar(&c.Nkey, "nats-nkey", "", "NATS nkey seed file (chio up writes one per role under DATA_DIR/nats-creds)")
	fs.StringVar(&c.User, "nats-user", "", "NATS user name (with --nats-password-file)")
	fs.StringVar(&c.PasswordFile, "nats-password-file", "", "file holding the --nats-user password")
	fs.StringVar(&c.TLSCA, "nats-tls-ca", "", "CA certificate (PEM) that signs the NATS servers' certificates")
	fs.StringVar(&c.TLSCert, "nats-tls-cert", "", "client certificate (PEM) for mutual TLS with NATS (with --nats-tls-key)")
	fs.StringVar(&c.TLSKey, "nats-tls-key", "", "client certificate's private key (PEM)")
}

// natsOptions are the client options of a command's connection acting as
// role: its credential, TLS and inbox prefix, and a log line for every
// permission the server refuses (a part used outside its role, or a
// permission table that misses what the part needs). refused receives
// the first refusal.
func natsOptions(role natsauth.Role, c *natsauth.Client) (opts []nats.Option, refused <-chan error, err error) {
	var zero natsauth.Client
	if c == nil {
		c = &zero
	}
	opts, err = c.Options(role)
	if err != nil {
		return nil, nil, usageError(err)
	}
	logOpt, refused := permissionLog(role)
	return append(opts, logOpt), refused, nil
}

// permissionLog logs the server's permission refusals on a connection;
// the channel receives the first one.
func permissionLog(role natsauth.Role) (nats.Option, <-chan error) {
	first := make(chan error, 1)
	return nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			slog.Error("NATS refused a permission", "role", role, "err", err)
			select {
			case first <- err:
			default:
			}
			return
		}
		attrs := []any{"role", role, "err", err}
		if sub != nil {
			attrs = append(attrs, "subject", sub.Subject)
		}
		slog.Warn("NATS asynchronous error", attrs...)
	}), first
}
