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
	"github.com/chio-ledger/chio/internal/identity"
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
	// requireDPoP: every read capability needs a proof of possession.
	requireDPoP bool
	// publicOrigin is the origin readers address the service by, which
	// their DPoP proofs name ("": each request's Host).
	publicOrigin string
	// identities, set by chio up from its policy, verifies access tokens
	// of the identity providers; nil: none are taken, unless oidc names
	// providers (a standalone service, which runs no policy).
	identities *identity.Verifier
	oidc       oidcFlags
}

func (f *readFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&f.issuers, "reader-issuer", nil,
		"trusted issuer of read capabilities: public key (64 hex) or a file holding it, e.g. keys/issuer.pub (repeatable)")
	cmd.Flags().StringVar(&f.serviceToken, "service-token", "",
		"bootstrap operator credential: a bearer token that reads everything (default $"+serviceTokenEnv+")")
	cmd.Flags().StringVar(&f.publicOrigin, "public-url", "",
		"the origin readers address this service by (https://host), which their DPoP proofs name; default: each request's Host")
	cmd.Flags().BoolVar(&f.requireDPoP, "require-dpop", false,
		"honour every read capability only with a proof of possession of its subject key (by default only capabilities that can delegate, or whose grants ask for it, need one)")
	// Readers with an identity provider's access token: the rules give
	// read grants ('sub=auditor:chio.read/receipts:read').
	f.oidc.register(cmd.Flags())
}

// standaloneIdentities sets identities from the --oidc flags of a service
// that runs no policy.
func (f *readFlags) standaloneIdentities() error {
	if f.identities != nil {
		return nil
	}
	ps, err := f.oidc.providers()
	if err != nil || ps == nil {
		return err
	}
	var opts []identity.Option
	c, err := f.oidc.client()
	if err != nil {
		return err
	}
	if c != nil {
		opts = append(opts, identity.WithHTTPClient(c))
	}
	if f.identities, err = identity.New(ps, opts...); err != nil {
		return usageError(fmt.Errorf("--oidc-issuer: %w", err))
	}
	return nil
}

// check refuses --oidc flags that cannot stand alone, before any() decides
// whether the service reads at all.
func (f *readFlags) check() error {
	_, err := f.oidc.providers()
	return err
}

// any reports whether any credential is accepted at all.
func (f *readFlags) any() bool {
	return len(f.issuers) > 0 || len(f.oidc.issuers) > 0 || f.identities != nil || orDefault(f.serviceToken, os.Getenv(serviceTokenEnv)) != ""
}

// authenticator builds the read authenticator, with a revocation mirror
// on js when capabilities are accepted; stop ends the mirror.
func (f *readFlags) authenticator(ctx context.Context, js jetstream.JetStream, replicas int) (*readauth.Authenticator, func(), error) {
	opts := []readauth.Option{readauth.WithServiceToken(orDefault(f.serviceToken, os.Getenv(serviceTokenEnv))),
		readauth.WithRequireDPoP(f.requireDPoP), readauth.WithPublicOrigin(f.publicOrigin)}
	opts = append(opts, httpLimitsFrom(ctx).readOptions()...) // --rate-limit-principal
	stop := func() {}
	if err := f.standaloneIdentities(); err != nil {
		return nil, nil, err
	}
	if f.identities != nil {
		opts = append(opts, readauth.WithIdentities(f.identities))
	}
	if len(f.issuers) > 0 || f.identities != nil {
		for _, s := range f.issuers {
			k, err := readPublicKey("--reader-issuer", s)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, readauth.WithTrustedIssuers(schemas.EncodePublicKey(k)))
		}
		kv, err := schemas.OpenKeyValue(ctx, js, schemas.RevocationsConfig(replicas)) // the operator owns it
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
		replay, err := dpopreplay.Open(ctx, js, replicas, dpop.DefaultLifetime, dpop.DefaultSkew)
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

// operatorTokenKeyFile is where chio up --require-dpop keeps the operator
// token's subject key.
const operatorTokenKeyFile = "operator.key"

// operatorToken issues a capability that reads everything (chio.read/*)
// from the issuer key in keysDir, for a fresh subject key. Written to
// dataDir/operator.token (0600), valid for ttl. The key is not kept (the
// token is a bearer credential, its holder never signs) unless keepKey:
// where every token needs a proof of possession, it is written to
// dataDir/operator.key (0600).
func operatorToken(dataDir, keysDir string, ttl time.Duration, keepKey bool) (string, error) {
	subject, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	keyPath := filepath.Join(dataDir, operatorTokenKeyFile)
	if keepKey {
		if err := os.WriteFile(keyPath, []byte(schemas.EncodePrivateKey(priv)+"\n"), 0o600); err != nil {
			return "", fmt.Errorf("operator token: %w", err)
		}
	} else if err := os.Remove(keyPath); err != nil && !errors.Is(err, os.ErrNotExist) {
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
