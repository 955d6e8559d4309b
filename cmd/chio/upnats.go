package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/natsembed"
	"github.com/chio-ledger/chio/ledger"
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
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, usageError(fmt.Errorf("%w: another process (another chio up?) listens there; choose another address with --nats-listen, or --nats-listen none", err))
	}
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

// certifyEdge gives chio up's edge a credential (its key under
// DATA_DIR/keys/edge.key, a credential issued at each start by this data
// directory's issuer key, DATA_DIR/keys/edge.cred) and makes its ledger
// fold only what a certified edge signed, and its task readers only the
// commits one signed.
func (c *upConfig) certifyEdge(ctx context.Context, out io.Writer, un *upNATS, keys *ledgerKeys) error {
	issuer, err := readIssuerKey(keys.Dir)
	if err != nil {
		return err
	}
	signer, err := issueEdgeCredential(issuer, c.ef.edgeID, filepath.Join(keys.Dir, edgeKeyFile), filepath.Join(keys.Dir, edgeCredFile), time.Now(), edgeCredentialTTL)
	if err != nil {
		return err
	}
	c.ef.signer = signer
	trust, stop, err := ledgerEdgeTrust(ctx, un.js[natsauth.Ledger], c.lf.replicas, []string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))})
	if err != nil {
		return err
	}
	c.stopTrust = stop
	c.lf.extra = append(c.lf.extra, ledger.WithEdgeTrust(trust))
	// The task readers (the edge's store, the projections) honour only
	// commits a certified edge signed, under the same trust.
	c.ef.taskTrust = schemas.NewEdgeVerifier(trust.Issuers, trust.RevokedAt)
	fmt.Fprintf(out, "chio up: edge credential %s in %s (the ledger folds only events, and the task readers only commits, a certified edge signed)\n",
		signer.Credential().ID, filepath.Join(keys.Dir, edgeCredFile))
	return nil
}

// stopEdgeTrust ends the ledger's revocation watch.
func (c *upConfig) stopEdgeTrust() {
	if c.stopTrust != nil {
		c.stopTrust()
	}
}
