package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/schemas"
)

// The files of an edge's signing key and credential in a key directory.
const (
	edgeKeyFile  = "edge.key"  // the edge's Ed25519 key (hex seed)
	edgeCredFile = "edge.cred" // its chio.edge_credential.v1, issued by the issuer key
)

// edgeCredentialTTL is how long a credential chio up or keygen issues is valid.
const edgeCredentialTTL = 365 * 24 * time.Hour

// registerEdgeSignerFlags declares how a standalone edge signs what it writes.
func registerEdgeSignerFlags(f *pflag.FlagSet, ef *edgeFlags) {
	f.StringVar(&ef.edgeKeyFile, "edge-key", "", "the edge's Ed25519 key (hex seed) that signs every event it writes (with --edge-credential; chio keygen --edge ID writes KEYS/edges/ID.key)")
	f.StringVar(&ef.edgeCredFile, "edge-credential", "", "the edge key's chio.edge_credential.v1, issued by the capability issuer key (KEYS/edges/ID.cred); a ledger with --edge-issuer folds only events so signed")
}

// edgeSigner is the signer the edge flags name, or nil without them.
func (f *edgeFlags) edgeSigner() (*schemas.EdgeSigner, error) {
	if f.signer != nil || (f.edgeKeyFile == "" && f.edgeCredFile == "") {
		return f.signer, nil
	}
	if f.edgeKeyFile == "" || f.edgeCredFile == "" {
		return nil, usageError(errors.New("--edge-key and --edge-credential go together"))
	}
	s, err := loadEdgeSigner(f.edgeKeyFile, f.edgeCredFile)
	if err != nil {
		return nil, err
	}
	f.signer = s
	return s, nil
}

func loadEdgeSigner(keyFile, credFile string) (*schemas.EdgeSigner, error) {
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("edge key: %w", err)
	}
	key, err := schemas.ParsePrivateKey(strings.TrimSpace(string(raw)))
	if err != nil {
		return nil, fmt.Errorf("edge key %s: %w", keyFile, err)
	}
	craw, err := os.ReadFile(credFile)
	if err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	cred, err := schemas.ParseEdgeCredential(craw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", credFile, err)
	}
	s, err := schemas.NewEdgeSigner(cred, key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", credFile, err)
	}
	return s, nil
}

// issueEdgeCredential makes (or reuses) the key keyFile and writes a new
// credential for it and edgeID to credFile, signed by issuer.
func issueEdgeCredential(issuer ed25519.PrivateKey, edgeID, keyFile, credFile string, now time.Time, ttl time.Duration) (*schemas.EdgeSigner, error) {
	var key ed25519.PrivateKey
	raw, err := os.ReadFile(keyFile)
	switch {
	case err == nil:
		if key, err = schemas.ParsePrivateKey(strings.TrimSpace(string(raw))); err != nil {
			return nil, fmt.Errorf("edge key %s: %w", keyFile, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		if _, key, err = ed25519.GenerateKey(rand.Reader); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(keyFile, []byte(schemas.EncodePrivateKey(key)+"\n"), 0o600); err != nil {
			return nil, fmt.Errorf("edge key: %w", err)
		}
	default:
		return nil, fmt.Errorf("edge key: %w", err)
	}
	cred, err := schemas.IssueEdgeCredential(issuer, schemas.EdgeCredentialBody{
		ID:     fmt.Sprintf("edge.%s.%d", edgeID, now.UnixNano()),
		EdgeID: edgeID, PublicKey: schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)),
		IssuedAt: uint64(now.Add(-time.Minute).Unix()), ExpiresAt: uint64(now.Add(ttl).Unix()),
	})
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(cred, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(credFile, append(out, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("edge credential: %w", err)
	}
	return schemas.NewEdgeSigner(cred, key)
}

// readIssuerKey reads the capability issuer's private key from a key directory.
func readIssuerKey(keysDir string) (ed25519.PrivateKey, error) {
	raw, err := os.ReadFile(filepath.Join(keysDir, issuerKeyFile))
	if err != nil {
		return nil, fmt.Errorf("issuer key: %w", err)
	}
	return schemas.ParsePrivateKey(strings.TrimSpace(string(raw)))
}

// revocationTimes watches CHIO_REVOCATIONS and reports when a credential
// id was revoked (unix seconds), the form edge trust takes; stop ends the
// watch.
func revocationTimes(ctx context.Context, js jetstream.JetStream, replicas int) (revokedAt func(id string) (uint64, bool), stop func(), err error) {
	kv, err := schemas.OpenKeyValue(ctx, js, schemas.RevocationsConfig(replicas))
	if err != nil {
		return nil, nil, fmt.Errorf("edge trust: %w", err)
	}
	return watchRevocationTimes(ctx, kv)
}

// awaitRevocations looks CHIO_REVOCATIONS up without creating it (a
// worker reads it, and its owners give it its replicas), waiting until it
// exists.
func awaitRevocations(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	for told := false; ; {
		kv, err := js.KeyValue(ctx, schemas.RevocationsBucket)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("edge trust: open %s: %w", schemas.RevocationsBucket, err)
		}
		if !told {
			slog.Warn("edge trust: waiting for " + schemas.RevocationsBucket + " (the ledger or chio up creates it)")
			told = true
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("edge trust: waiting for %s: %w", schemas.RevocationsBucket, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// watchRevocationTimes is revocationTimes over an open bucket.
func watchRevocationTimes(ctx context.Context, kv jetstream.KeyValue) (revokedAt func(id string) (uint64, bool), stop func(), err error) {
	w, err := revocation.Watch(ctx, kv, slog.Default())
	if err != nil {
		return nil, nil, fmt.Errorf("edge trust: %w", err)
	}
	// When each revoked credential was revoked, read once: a revoked
	// credential's every message would otherwise cost a KV read.
	var at sync.Map
	revokedAt = func(id string) (uint64, bool) {
		if w.FirstRevoked([]string{id}) == "" {
			return 0, false
		}
		if v, ok := at.Load(id); ok {
			return v.(uint64), true
		}
		// When it was revoked decides which messages it still signed,
		// the same on every replay.
		gctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		e, err := kv.Get(gctx, schemas.KVKey(id))
		if err != nil {
			return 0, true // revoked, and when cannot be read: refuse
		}
		var rev schemas.Revocation
		if json.Unmarshal(e.Value(), &rev) != nil {
			return 0, true
		}
		at.Store(id, rev.RevokedAt)
		return rev.RevokedAt, true
	}
	return revokedAt, w.Stop, nil
}

// ledgerEdgeTrust is the edge trust of a ledger: the issuers whose edge
// credentials it honours and the revocations of CHIO_REVOCATIONS, with
// when each was made. stop ends the watch.
func ledgerEdgeTrust(ctx context.Context, js jetstream.JetStream, replicas int, issuers []string) (ledger.EdgeTrust, func(), error) {
	revokedAt, stop, err := revocationTimes(ctx, js, replicas)
	if err != nil {
		return ledger.EdgeTrust{}, nil, err
	}
	return ledger.EdgeTrust{Issuers: issuers, RevokedAt: revokedAt}, stop, nil
}

// edgeVerifier is the trust of a task reader (an A2A edge's task store,
// the projections) in what edges wrote: the issuers' credentials, less the
// revoked ones. stop ends the revocation watch.
func edgeVerifier(ctx context.Context, js jetstream.JetStream, replicas int, issuers []string) (*schemas.EdgeVerifier, func(), error) {
	revokedAt, stop, err := revocationTimes(ctx, js, replicas)
	if err != nil {
		return nil, nil, err
	}
	return schemas.NewEdgeVerifier(issuers, revokedAt), stop, nil
}

// edgeIssuerKeys reads --edge-issuer values (hex or files) as hex keys.
func edgeIssuerKeys(values []string) ([]string, error) {
	var keys []string
	for _, s := range values {
		k, err := readPublicKey("--edge-issuer", s)
		if err != nil {
			return nil, err
		}
		keys = append(keys, schemas.EncodePublicKey(k))
	}
	return keys, nil
}

// taskTrust is the edge trust of a task reader named by --edge-issuer,
// nil without the flag (every commit honoured, as the warning says).
func taskTrust(ctx context.Context, js jetstream.JetStream, replicas int, who string, issuers []string) (*schemas.EdgeVerifier, func(), error) {
	if len(issuers) == 0 {
		slog.Warn("no --edge-issuer: " + who + " honours every task commit on the stream, signed by an edge or not")
		return nil, func() {}, nil
	}
	keys, err := edgeIssuerKeys(issuers)
	if err != nil {
		return nil, nil, err
	}
	return edgeVerifier(ctx, js, replicas, keys)
}

// registerEdgeIssuerFlag declares --edge-issuer, the ledger's trust in
// edges' credentials.
func registerEdgeIssuerFlag(cmd *cobra.Command, issuers *[]string) {
	cmd.Flags().StringArrayVar(issuers, "edge-issuer", nil, "fold only events signed by an edge whose chio.edge_credential.v1 this key issued (64 hex, or a file holding it, e.g. KEYS/issuer.pub; repeatable); others go to CHIO_QUARANTINE. Without it every event is folded")
}

// registerTaskTrustFlag declares --edge-issuer on a reader of task
// commits (an A2A edge, the projections).
func registerTaskTrustFlag(f *pflag.FlagSet, issuers *[]string) {
	f.StringArrayVar(issuers, "edge-issuer", nil, "honour only task commits signed by an edge whose chio.edge_credential.v1 this key issued (64 hex, or a file holding it, e.g. KEYS/issuer.pub; repeatable). Without it every commit is honoured")
}

// withEdgeIssuers adds the ledger's edge trust for issuers to lf; stop
// ends its revocation watch.
func withEdgeIssuers(ctx context.Context, out io.Writer, js jetstream.JetStream, lf *ledgerFlags, issuers []string) (stop func(), err error) {
	if len(issuers) == 0 {
		slog.Warn("no --edge-issuer: every event on the stream is folded into a receipt, signed by an edge or not")
		return func() {}, nil
	}
	keys, err := edgeIssuerKeys(issuers)
	if err != nil {
		return nil, err
	}
	trust, stop, err := ledgerEdgeTrust(ctx, js, lf.replicas, keys)
	if err != nil {
		return nil, err
	}
	lf.extra = append(lf.extra, ledger.WithEdgeTrust(trust))
	fmt.Fprintf(out, "chio ledger: folding only events signed by edges certified by %d issuer key(s); others go to %s\n", len(keys), ledger.QuarantineStream)
	return stop, nil
}

// certifyEdges issues each edge id a key and credential under dir/edges,
// keeping those already there.
func certifyEdges(out io.Writer, dir string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	issuer, err := readIssuerKey(dir)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if !schemas.ValidName(id) {
			return usageError(fmt.Errorf("--edge %q is not an edge id", id))
		}
		key, cred := filepath.Join(dir, "edges", id+".key"), filepath.Join(dir, "edges", id+".cred")
		if _, err := os.Stat(cred); err == nil {
			continue
		}
		s, err := issueEdgeCredential(issuer, id, key, cred, time.Now(), edgeCredentialTTL)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "edge %s: key %s, credential %s (%s)\n", id, key, cred, s.Credential().ID)
	}
	return nil
}
