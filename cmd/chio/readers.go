package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/internal/revocation"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// readFlags say who may read the private half of a service (receipts,
// tasks, lineage, reports): holders of capabilities from the trusted
// issuers, each within its scope, and the bootstrap service token.
type readFlags struct {
	issuers      []string
	serviceToken string
}

func (f *readFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.issuers, "reader-issuer", nil,
		"trusted issuer of read capabilities: public key (64 hex) or a file holding it, e.g. keys/issuer.pub (repeatable)")
	cmd.Flags().StringVar(&f.serviceToken, "service-token", "",
		"bootstrap operator credential: a bearer token that reads everything (default $"+serviceTokenEnv+")")
}

// any reports whether any credential is accepted at all.
func (f *readFlags) any() bool {
	return len(f.issuers) > 0 || orDefault(f.serviceToken, os.Getenv(serviceTokenEnv)) != ""
}

// authenticator builds the read authenticator, with a revocation mirror
// on js when capabilities are accepted; stop ends the mirror.
func (f *readFlags) authenticator(ctx context.Context, js jetstream.JetStream, replicas int) (*readauth.Authenticator, func(), error) {
	opts := []readauth.Option{readauth.WithServiceToken(orDefault(f.serviceToken, os.Getenv(serviceTokenEnv)))}
	stop := func() {}
	if len(f.issuers) > 0 {
		for _, s := range f.issuers {
			k, err := readPublicKey("--reader-issuer", s)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, readauth.WithTrustedIssuers(schemas.EncodePublicKey(k)))
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, schemas.RevocationsConfig(replicas))
		if err != nil {
			return nil, nil, fmt.Errorf("read authorization: open %s: %w", schemas.RevocationsBucket, err)
		}
		w, err := revocation.Watch(ctx, kv, slog.Default())
		if err != nil {
			return nil, nil, fmt.Errorf("read authorization: %w", err)
		}
		// Capabilities that can delegate read with proofs of possession,
		// each used once across replicas (and edges): the shared replay
		// state.
		replay, err := dpopreplay.Open(ctx, js, replicas, dpopreplay.Window(dpop.DefaultLifetime, dpop.DefaultSkew))
		if err != nil {
			w.Stop()
			return nil, nil, fmt.Errorf("read authorization: %w", err)
		}
		opts = append(opts, readauth.WithRevocations(w), readauth.WithReplay(replay))
		stop = w.Stop
	}
	return readauth.New(opts...), stop, nil
}

// operatorTokenFile is where chio up writes its operator read token.
const operatorTokenFile = "operator.token"

// operatorToken issues a capability that reads everything (chio.read/*)
// from the issuer key in keysDir, for a fresh subject key that is not
// kept: the token is a bearer credential, its holder never signs. Written
// to dataDir/operator.token (0600), valid for ttl.
func operatorToken(dataDir, keysDir string, ttl time.Duration) (string, error) {
	subject, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	grant, err := schemas.ReadGrant(schemas.ReadAll)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dataDir, operatorTokenFile)
	if _, err := writeLocalToken(keysDir, path, "operator-"+uuid.Must(uuid.NewV7()).String(), subject, []schemas.ToolGrant{grant}, ttl); err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	return path, nil
}

// errNoReaders is the usage error of a service started with no way to read it.
var errNoReaders = errors.New("pass --reader-issuer (capabilities from that issuer read within their scope) and/or --service-token (or $" +
	serviceTokenEnv + "): without either, nobody can read receipts, tasks or reports")
