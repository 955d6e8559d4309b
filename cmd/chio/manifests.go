package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"sort"
	"strings"

	"github.com/labstack/echo/v4"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/schemas"
)

// manifestKeyFile is the manifest signing key in chio up's keys directory
// (hex Ed25519 seed); manifestPubFile is its public key.
const (
	manifestKeyFile = "manifest.key"
	manifestPubFile = "manifest.pub"
)

// registerManifestKeyFlag adds --manifest-key, shared by every command
// that builds a tool registry.
func registerManifestKeyFlag(f *pflag.FlagSet, ef *edgeFlags) {
	f.StringVar(&ef.manifestKey, "manifest-key", "", "Ed25519 key (hex seed) that signs every tool manifest as chio.signed_manifest.v1; receipts name the signed manifest's hash; created if missing, its public key written beside it as .pub (default: manifests hashed, not signed; chio up: DATA_DIR/keys/"+manifestKeyFile+")")
}

// registryOptions are the registry options the flags ask for.
func (f *edgeFlags) registryOptions() ([]tools.RegistryOption, error) {
	if f.manifestKey == "" {
		return nil, nil
	}
	key, err := loadOrCreateKey(f.manifestKey)
	if err != nil {
		return nil, fmt.Errorf("--manifest-key: %w", err)
	}
	if err := writePublicKey(f.manifestKey, key); err != nil {
		return nil, fmt.Errorf("--manifest-key: %w", err)
	}
	return []tools.RegistryOption{tools.WithManifestKey(key)}, nil
}

// writePublicKey writes key's public key beside keyFile (NAME.key →
// NAME.pub), for verifiers, unless a file is already there.
func writePublicKey(keyFile string, key ed25519.PrivateKey) error {
	pub := strings.TrimSuffix(keyFile, ".key") + ".pub"
	if _, err := os.Stat(pub); err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.WriteFile(pub, []byte(schemas.EncodePublicKey(key.Public().(ed25519.PublicKey))+"\n"), 0o644)
}

// verifyManifest is chio verify --manifest F --manifest-key K: K is the
// public key (64 hex) or a file holding it.
func verifyManifest(cmd *cobra.Command, manifestF, keyArg string) error {
	raw, err := os.ReadFile(manifestF)
	if err != nil {
		return usageError(fmt.Errorf("--manifest: %w", err))
	}
	key := keyText(keyArg)
	if key == "" {
		return usageError(errors.New("--manifest needs --manifest-key, the signer's public key (or a file holding it, e.g. DATA_DIR/keys/" + manifestPubFile + ")"))
	}
	if _, err := schemas.ParsePublicKey(key); err != nil {
		return usageError(fmt.Errorf("--manifest-key: %w", err))
	}
	s, err := schemas.ParseSignedManifest(raw)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("verify: FAILED parse: %w", err)}
	}
	if err := s.Verify(key); err != nil {
		return &exitError{code: 1, err: fmt.Errorf("verify: FAILED %s: %w", manifestCheck(err), err)}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "verify: OK manifest %s signed by %s\n", s.ManifestHash, s.SignerKey)
	return nil
}

// manifestCheck names the check a manifest failed.
func manifestCheck(err error) string {
	for _, c := range []struct {
		err  error
		name string
	}{
		{schemas.ErrManifestSchema, "schema"},
		{schemas.ErrManifestHash, "manifest_hash"},
		{schemas.ErrManifestUnsigned, "signature"},
		{schemas.ErrManifestSigner, "signer_key"},
		{schemas.ErrManifestSignature, "signature"},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "key"
}

// mountToolsListing serves r's tools.Listing at tools.ListingPath to
// operators (a reader of every view): it shows tools no audience may
// discover, so capabilities that only call tools never see it.
func mountToolsListing(e *echo.Echo, r *replica, f *edgeFlags, grpc bool, auth *readauth.Authenticator) {
	audiences := []tools.Exposure{
		f.exposure(r.policy),
		r.policy.ToolExposure("mcp", f.exposeAll),
		openaiExposure(r.policy, f, ""),
		r.policy.ToolExposure("acp", f.exposeAll),
	}
	e.GET(tools.ListingPath, func(c echo.Context) error {
		reader, err := auth.Authenticate(c.Request())
		var rerr *readauth.Error
		switch {
		case errors.As(err, &rerr):
			return c.JSON(rerr.Status, map[string]string{"error": rerr.Message})
		case err != nil:
			return c.JSON(http.StatusUnauthorized, map[string]string{"error": err.Error()})
		case reader == nil:
			return c.JSON(http.StatusUnauthorized, map[string]string{"error": "a credential is required: the operator token"})
		case !reader.AllViews():
			return c.JSON(http.StatusForbidden, map[string]string{"error": "the tool listing is for operators (a credential that reads every view)"})
		}
		return c.JSON(http.StatusOK, r.registry.Listing(audiences, tools.A2AProfile{GRPC: grpc}, ""))
	})
}

// maxListingBytes bounds a listing read by chio tools list.
const maxListingBytes = 64 << 20

// fetchListing reads an edge's tools.Listing with client, which carries
// the credential.
func fetchListing(ctx context.Context, client *http.Client, base, token string) (*tools.Listing, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+tools.ListingPath, nil)
	if err != nil {
		return nil, fmt.Errorf("tool listing: %w", err)
	}
	if token != "" && req.Header.Get("Authorization") == "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("tool listing: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxListingBytes))
	if err != nil {
		return nil, fmt.Errorf("tool listing: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tool listing: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var l tools.Listing
	if err := json.Unmarshal(body, &l); err != nil {
		return nil, fmt.Errorf("tool listing: %w", err)
	}
	return &l, nil
}

// printListing writes one line per tool: server, tool, origin, the
// audiences it is exposed to, its A2A and ACP fidelity, and its manifest's
// hash. A server without tools (an upstream withdrew them) gets a line
// with "-" for its tool.
func printListing(w io.Writer, l *tools.Listing, server string) {
	fmt.Fprintln(w, "SERVER\tTOOL\tORIGIN\tEXPOSED TO\tFIDELITY\tMANIFEST")
	for _, s := range l.Servers {
		if server != "" && s.ServerID != server {
			continue
		}
		hash := s.ManifestHash
		if len(hash) > 16 {
			hash = hash[:16]
		}
		if len(s.Tools) == 0 {
			fmt.Fprintf(w, "%s\t-\t%s\t-\t-\t%s\n", s.ServerID, s.Origin, hash)
		}
		for _, t := range s.Tools {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", s.ServerID, t.Name, s.Origin, exposedTo(t.Exposure), fidelities(t.Fidelity), hash)
		}
	}
}

// exposedTo is "a2a,mcp", "internal" or "none".
func exposedTo(e map[string]string) string {
	var in []string
	internal := false
	for a, state := range e {
		switch state {
		case tools.Exposed:
			in = append(in, a)
		case tools.Internal:
			internal = true
		}
	}
	switch {
	case internal:
		return "internal"
	case len(in) == 0:
		return "none"
	}
	sort.Strings(in)
	return strings.Join(in, ",")
}

// fidelities is "a2a:lossless acp:adapted".
func fidelities(f map[string]tools.Fidelity) string {
	var out []string
	for _, p := range []string{"a2a", "acp"} {
		if v, ok := f[p]; ok {
			out = append(out, p+":"+string(v.Kind))
		}
	}
	return strings.Join(out, " ")
}
