package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/ledger"
	"github.com/chio-ledger/chio/schemas"
)

// DefaultOrigin is the log origin of keys generated without --origin.
const DefaultOrigin = "chio.localhost/ledger"

// Key files in a key directory. Private keys are 0600.
const (
	kernelKeyFile      = "kernel.key"      // receipt and checkpoint-statement signing key (hex Ed25519 seed)
	kernelPubFile      = "kernel.pub"      // its public key, the receipts' kernel_key
	checkpointKeyFile  = "checkpoint.key"  // C2SP checkpoint note signer key (PRIVATE+KEY+origin+…)
	checkpointVKeyFile = "checkpoint.vkey" // its note verifier key
	issuerKeyFile      = "issuer.key"      // capability issuer key (hex Ed25519 seed)
	issuerPubFile      = "issuer.pub"
)

func newKeygenCmd() *cobra.Command {
	var out, origin string
	var force, keep bool
	var tlsHosts, httpsHosts, edges []string
	var natsRoles bool
	cmd := &cobra.Command{
		Use:   "keygen --out DIR",
		Short: "Generate the kernel, checkpoint and capability issuer keys, and the NATS credential of every role",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError(errors.New("--out is required"))
			}
			if force && keep {
				return usageError(errors.New("--force and --keep contradict each other"))
			}
			// The NATS credentials of every role (and, for the named
			// hosts, the servers' TLS): made when missing, kept otherwise.
			if len(tlsHosts) > 0 && !natsRoles {
				return usageError(errors.New("--nats-tls-host needs --nats-roles"))
			}
			if len(httpsHosts) > 0 && len(tlsHosts) == 0 {
				return usageError(errors.New("--https-host needs --nats-tls-host: its certificate comes from the internal CA made there"))
			}
			if natsRoles {
				natsDir, err := writeNATSCredentials(out, tlsHosts)
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "NATS credentials in %s (one nkey seed per role, and %s for the servers)\n", natsDir, natsauth.UsersConfFile)
			}
			if len(httpsHosts) > 0 {
				tlsDir := filepath.Join(out, "tls")
				if err := natsauth.WriteHTTPSCert(filepath.Join(out, "nats"), tlsDir, httpsHosts); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "HTTPS certificate in %s (%s, %s; clients trust %s)\n", tlsDir, natsauth.HTTPSCertFile, natsauth.HTTPSKeyFile,
					filepath.Join(out, "nats", natsauth.CAFile))
			}
			if _, err := os.Stat(filepath.Join(out, kernelKeyFile)); err == nil && keep {
				fmt.Fprintf(cmd.OutOrStdout(), "kept the keys in %s\n", out)
				return certifyEdges(cmd.OutOrStdout(), out, edges)
			}
			if err := generateKeys(out, origin, force); err != nil {
				return err
			}
			if err := certifyEdges(cmd.OutOrStdout(), out, edges); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote keys for origin %q to %s\n", origin, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write the keys to")
	cmd.Flags().StringVar(&origin, "origin", DefaultOrigin, "log origin: the checkpoint key's name (a schema-less URL)")
	cmd.Flags().BoolVar(&force, "force", false, "overwrite existing keys")
	cmd.Flags().BoolVar(&keep, "keep", false, "keep existing keys and succeed (one-shot setup of a cluster's shared keys)")
	cmd.Flags().StringArrayVar(&edges, "edge", nil, "also issue edge ID a signing key and credential, DIR/edges/ID.key and ID.cred (repeatable; kept if present), for its --edge-key and --edge-credential")
	cmd.Flags().BoolVar(&natsRoles, "nats-roles", false, "also write DIR/nats: one NATS nkey seed per role and the servers' users block (a cluster's; chio up makes its own)")
	cmd.Flags().StringArrayVar(&httpsHosts, "https-host", nil, "also issue, from that internal CA, an HTTPS server certificate for this host name or IP (repeatable), in DIR/tls (the compose proxy's; kept if present)")
	cmd.Flags().StringArrayVar(&tlsHosts, "nats-tls-host", nil, "also make an internal CA and a NATS server certificate for this host name or IP (repeatable), in DIR/nats")
	return cmd
}

// writeNATSCredentials makes DIR/nats: one nkey seed per role, the
// servers' users block, and with hosts, the internal CA and the servers'
// certificate.
func writeNATSCredentials(dir string, hosts []string) (string, error) {
	natsDir := filepath.Join(dir, "nats")
	creds, err := natsauth.LoadOrCreate(natsDir)
	if err != nil {
		return "", err
	}
	if _, err := creds.WriteUsersConf(); err != nil {
		return "", err
	}
	if len(hosts) > 0 {
		if err := natsauth.WriteServerTLS(natsDir, hosts); err != nil {
			return "", err
		}
	}
	return natsDir, nil
}

func generateKeys(dir, origin string, force bool) error {
	if origin == "" || strings.ContainsAny(origin, " +\n") {
		return usageError(fmt.Errorf("origin %q must be non-empty, without spaces or '+'", origin))
	}
	if !force {
		if _, err := os.Stat(filepath.Join(dir, kernelKeyFile)); err == nil {
			return fmt.Errorf("keygen: %s already holds keys (use --force to replace them)", dir)
		}
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		return fmt.Errorf("keygen: checkpoint key: %w", err)
	}
	_, kernel, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	_, issuer, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("keygen: %w", err)
	}
	files := []struct {
		name, content string
		mode          fs.FileMode
	}{
		{kernelKeyFile, schemas.EncodePrivateKey(kernel), 0o600},
		{kernelPubFile, schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey)), 0o644},
		{checkpointKeyFile, skey, 0o600},
		{checkpointVKeyFile, vkey, 0o644},
		{issuerKeyFile, schemas.EncodePrivateKey(issuer), 0o600},
		{issuerPubFile, schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey)), 0o644},
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.content+"\n"), f.mode); err != nil {
			return fmt.Errorf("keygen: %w", err)
		}
	}
	return nil
}

// ledgerKeys are the keys the ledger signs with, and their public forms.
type ledgerKeys struct {
	ledger.Keys
	VKey      string
	KernelPub string
	Dir       string // where they were loaded from
}

// loadLedgerKeys reads a key directory. With a non-empty origin it
// generates keys for that origin on first use, and refuses keys that sign
// for another one: the checkpoint key's name is the log's origin.
func loadLedgerKeys(dir, origin string) (*ledgerKeys, error) {
	if _, err := os.Stat(filepath.Join(dir, kernelKeyFile)); errors.Is(err, fs.ErrNotExist) && origin != "" {
		if err := generateKeys(dir, origin, false); err != nil {
			return nil, err
		}
	}
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("load keys: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	kernelHex, err := read(kernelKeyFile)
	if err != nil {
		return nil, err
	}
	kernel, err := schemas.ParsePrivateKey(kernelHex)
	if err != nil {
		return nil, fmt.Errorf("load keys: %s: %w", kernelKeyFile, err)
	}
	skey, err := read(checkpointKeyFile)
	if err != nil {
		return nil, err
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		return nil, fmt.Errorf("load keys: %s: %w", checkpointKeyFile, err)
	}
	vkey, err := read(checkpointVKeyFile)
	if err != nil {
		return nil, err
	}
	verifier, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, fmt.Errorf("load keys: %s: %w", checkpointVKeyFile, err)
	}
	if verifier.Name() != signer.Name() || verifier.KeyHash() != signer.KeyHash() {
		return nil, fmt.Errorf("load keys: %s and %s are not a pair", checkpointKeyFile, checkpointVKeyFile)
	}
	if origin != "" && signer.Name() != origin {
		return nil, fmt.Errorf("load keys: %s signs checkpoints for origin %q, not %q (the origin is the checkpoint key's name; run keygen --origin for a new log)", dir, signer.Name(), origin)
	}
	return &ledgerKeys{
		Keys: ledger.Keys{Kernel: kernel, Checkpoint: signer, CheckpointVerifier: verifier},
		VKey: vkey, KernelPub: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey)), Dir: dir,
	}, nil
}

// keyText is a key given on the command line: the value itself, or the
// contents of the file it names.
// vkeyFlag reads --vkey: a note verifier key, or a file holding one. Its
// error says what was expected, which note's own ("malformed verifier
// id") does not.
func vkeyFlag(v string) (note.Verifier, error) {
	verifier, err := note.NewVerifier(keyText(v))
	if err != nil {
		return nil, fmt.Errorf("--vkey %q: want the log's note verifier key (ORIGIN+HASH+KEY, as in KEYS/%s) or a file holding it: %w",
			abbreviateFlag(v), checkpointVKeyFile, err)
	}
	return verifier, nil
}

func abbreviateFlag(v string) string {
	if len(v) > 80 {
		return v[:80] + "…"
	}
	return v
}

func keyText(v string) string {
	v = strings.TrimSpace(v)
	if b, err := os.ReadFile(v); err == nil {
		return strings.TrimSpace(string(b))
	}
	return v
}
