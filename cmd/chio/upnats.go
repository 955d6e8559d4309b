package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/schemas"
)

// natsCredsDir is where chio up keeps one NATS credential per role.
func natsCredsDir(dataDir string) string { return filepath.Join(dataDir, "nats-creds") }

// upNATS is chio up's embedded server and one connection per role: each
// part acts with its own identity, so a fault in one cannot write
// another's state.
type upNATS struct {
	ns        *natsembed.Server
	creds     *natsauth.Credentials
	listening bool
	conns     []*nats.Conn
	js        map[natsauth.Role]jetstream.JetStream
}

// startNATS starts the embedded NATS JetStream server, which accepts only
// the roles' credentials (generated under the data directory on first
// start), and connects each in-process part as its role; listening is
// false when it serves this process only (--nats-listen none).
func (c *upConfig) startNATS(ctx context.Context) (*upNATS, error) {
	cfg, err := c.natsConfig()
	if err != nil {
		return nil, err
	}
	creds, err := natsauth.LoadOrCreate(natsCredsDir(c.dataDir))
	if err != nil {
		return nil, err
	}
	cfg.Users = creds.Users()
	ns, err := natsembed.Start(cfg)
	if err != nil {
		return nil, err
	}
	u := &upNATS{ns: ns, creds: creds, listening: !cfg.DontListen, js: map[natsauth.Role]jetstream.JetStream{}}
	for _, r := range []natsauth.Role{natsauth.Operator, natsauth.Edge, natsauth.Ledger, natsauth.Projections} {
		logOpt, _ := permissionLog(r)
		nc, err := ns.Connect(append(creds.Options(r), nats.Name("chio-up-"+string(r)), logOpt)...)
		if err != nil {
			u.stop()
			return nil, err
		}
		u.conns = append(u.conns, nc)
		js, err := jetstream.New(nc)
		if err != nil {
			u.stop()
			return nil, fmt.Errorf("jetstream: %w", err)
		}
		u.js[r] = js
	}
	// The operator owns the revocations bucket: it configures it before
	// any part opens it.
	if _, err := u.js[natsauth.Operator].CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(c.lf.replicas)); err != nil {
		u.stop()
		return nil, fmt.Errorf("revocations bucket: %w", err)
	}
	return u, nil
}

// stop closes the connections, then the server.
func (u *upNATS) stop() {
	for _, nc := range u.conns {
		nc.Close()
	}
	u.ns.Stop()
}

// roleFiles lists every role's nkey seed file, for chio up's banner.
func roleFiles() string {
	var out []string
	for _, r := range natsauth.Roles() {
		out = append(out, natsauth.SeedFile(r))
	}
	return strings.Join(out, ", ")
}
