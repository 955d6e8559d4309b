package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/kernel"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

func newCapabilityCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "capability",
		Short: "Issue, inspect and revoke chio.capability.v1 tokens",
	}
	cmd.AddCommand(newCapabilityKeygenCmd(), newCapabilityIssueCmd(), newCapabilityInspectCmd(), newCapabilityRevokeCmd(), newCapabilityProofCmd(), newCapabilityAncestorCmd())
	return cmd
}

func newCapabilityKeygenCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Generate an agent's Ed25519 key: writes the private key to FILE (0600) and prints the public key",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageError(errors.New("--out is required"))
			}
			_, priv, err := ed25519.GenerateKey(rand.Reader)
			if err != nil {
				return fmt.Errorf("capability keygen: %w", err)
			}
			f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return fmt.Errorf("capability keygen: %w", err)
			}
			if _, err := fmt.Fprintln(f, schemas.EncodePrivateKey(priv)); err != nil {
				f.Close()
				return fmt.Errorf("capability keygen: %w", err)
			}
			if err := f.Close(); err != nil {
				return fmt.Errorf("capability keygen: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), schemas.EncodePublicKey(priv.Public().(ed25519.PublicKey)))
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "file to write the private key to (must not exist)")
	return cmd
}

func newCapabilityIssueCmd() *cobra.Command {
	var keyFile, subject, delegateFrom, id, output string
	var grantSpecs, readTargets []string
	var ttl time.Duration
	var maxInv uint32
	cmd := &cobra.Command{
		Use:   "issue --issuer-key FILE --subject HEX --grant SERVER/TOOL[:op,op] [--ttl 1h] [--max-invocations N] [--delegate-from TOKEN]",
		Short: "Sign a capability token and print it as JSON and in header form (base64url)",
		Long: "Signs a chio.capability.v1 token for --subject with one grant per --grant (TOOL may be \"*\"; operations\n" +
			"default to invoke). With --delegate-from the token is a child of the given one (JSON, header form,\n" +
			"@FILE or - for stdin): --issuer-key must then be the parent's subject key, and the child may only\n" +
			"narrow the parent, whose grant must allow the delegate operation.\n" +
			"Prints the token's JSON on the first line and its header form on the second (--output json|header|both).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || subject == "" || len(grantSpecs)+len(readTargets) == 0 {
				return usageError(errors.New("--issuer-key, --subject and at least one --grant or --read are required"))
			}
			if ttl <= 0 {
				return usageError(errors.New("--ttl must be positive"))
			}
			if output != "both" && output != "json" && output != "header" {
				return usageError(fmt.Errorf("--output %q: want json, header or both", output))
			}
			if _, err := schemas.ParsePublicKey(subject); err != nil {
				return usageError(fmt.Errorf("--subject: %w", err))
			}
			if strings.HasSuffix(keyFile, ".pub") {
				// A public key is 32 bytes of hex like a seed, so it would
				// parse, and sign with a key nobody trusts.
				return usageError(fmt.Errorf("--issuer-key %s is a public key: give the signing key (its seed, e.g. %s)", keyFile,
					strings.TrimSuffix(keyFile, ".pub")+".key"))
			}
			keyText, err := os.ReadFile(keyFile)
			if err != nil {
				return fmt.Errorf("issue: %w", err)
			}
			priv, err := schemas.ParsePrivateKey(string(keyText))
			if err != nil {
				return fmt.Errorf("issue: %s: %w", keyFile, err)
			}
			var grants []schemas.ToolGrant
			for _, s := range grantSpecs {
				g, err := parseGrant(s)
				if err != nil {
					return usageError(err)
				}
				if cmd.Flags().Changed("max-invocations") {
					g.MaxInvocations = &maxInv
				}
				grants = append(grants, g)
			}
			for _, t := range readTargets {
				g, err := schemas.ReadGrant(t)
				if err != nil {
					return usageError(fmt.Errorf("--read %q: %w", t, err))
				}
				grants = append(grants, g)
			}
			if id == "" {
				id = uuid.Must(uuid.NewV7()).String()
			}
			now := time.Now()
			body := schemas.CapabilityBody{
				ID: id, Subject: subject, Scope: schemas.Scope{Grants: grants},
				IssuedAt: uint64(now.Unix()), ExpiresAt: uint64(now.Add(ttl).Unix()),
			}
			var tok *schemas.CapabilityToken
			if delegateFrom != "" {
				parent, err := readToken(cmd.InOrStdin(), delegateFrom)
				if err != nil {
					return usageError(fmt.Errorf("--delegate-from: %w", err))
				}
				// A child cannot outlive its parent: clip rather than fail.
				body.ExpiresAt = min(body.ExpiresAt, parent.ExpiresAt)
				body.IssuedAt = max(body.IssuedAt, parent.IssuedAt)
				tok, err = schemas.Delegate(priv, parent, body)
				if err != nil {
					return fmt.Errorf("issue: %w", err)
				}
			} else {
				body.Issuer = schemas.EncodePublicKey(priv.Public().(ed25519.PublicKey))
				tok, err = schemas.IssueCapability(priv, body)
				if err != nil {
					return fmt.Errorf("issue: %w", err)
				}
			}
			raw, _ := json.Marshal(tok)
			h, err := schemas.EncodeCapabilityHeader(tok)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output != "header" {
				fmt.Fprintln(out, string(raw))
			}
			if output != "json" {
				fmt.Fprintln(out, h)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "issuer-key", "", "file holding the signing key (hex Ed25519 seed, e.g. .chio/keys/issuer.key)")
	cmd.Flags().StringVar(&subject, "subject", "", "the holder's public key (64 lowercase hex)")
	cmd.Flags().StringArrayVar(&grantSpecs, "grant", nil, "SERVER/TOOL[:op,op] (repeatable; TOOL may be *)")
	cmd.Flags().StringArrayVar(&readTargets, "read", nil, "read grant: * (every receipt and operator view), receipts (every receipt: an auditor) or a principal p:HEX (what was done under it: a tenant); repeatable")
	cmd.Flags().DurationVar(&ttl, "ttl", time.Hour, "validity from now")
	cmd.Flags().Uint32Var(&maxInv, "max-invocations", 0, "invocation budget of each grant")
	cmd.Flags().StringVar(&delegateFrom, "delegate-from", "", "parent token to delegate from (JSON, header form, @FILE or -)")
	cmd.Flags().StringVar(&id, "id", "", "capability id (default: a new UUIDv7)")
	cmd.Flags().StringVar(&output, "output", "both", "json, header or both")
	return cmd
}

// parseGrant reads SERVER/TOOL[:op,op]. Tool names may hold "::" (as in
// "pricing::quote"), so only a single ':' introduces operations.
func parseGrant(s string) (schemas.ToolGrant, error) {
	server, rest, ok := strings.Cut(s, "/")
	if !ok || server == "" || rest == "" {
		return schemas.ToolGrant{}, fmt.Errorf("--grant %q: want SERVER/TOOL[:op,op]", s)
	}
	g := schemas.ToolGrant{ServerID: server, ToolName: rest, Operations: []schemas.Operation{schemas.OpInvoke}}
	if i := strings.LastIndex(rest, ":"); i > 0 && rest[i-1] != ':' {
		g.ToolName, g.Operations = rest[:i], nil
		for _, o := range strings.Split(rest[i+1:], ",") {
			g.Operations = append(g.Operations, schemas.Operation(o))
		}
	}
	probe := schemas.Scope{Grants: []schemas.ToolGrant{g}}
	if err := probe.Validate(); err != nil {
		return schemas.ToolGrant{}, fmt.Errorf("--grant %q: %w", s, err)
	}
	return g, nil
}

// readToken reads a token given inline (JSON or header form), as @FILE, or
// as - for stdin.
func readToken(stdin io.Reader, arg string) (*schemas.CapabilityToken, error) {
	text := arg
	switch {
	case arg == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 4*schemas.MaxCapabilityBytes))
		if err != nil {
			return nil, err
		}
		text = string(b)
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return nil, err
		}
		text = string(b)
	}
	// Output of `issue` is two lines; take the first token-looking line.
	text = strings.TrimSpace(text)
	if first, _, ok := strings.Cut(text, "\n"); ok {
		text = first
	}
	raw, err := schemas.DecodeCapabilityText(text)
	if err != nil {
		return nil, err
	}
	return schemas.ParseCapability(raw)
}

// readTokenText is readToken's token in header form, as a client presents
// it (and a proof's ath hashes it): the input's header-form line if it has
// one, else the JSON token encoded.
func readTokenText(stdin io.Reader, arg string) (string, *schemas.CapabilityToken, error) {
	text := arg
	switch {
	case arg == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 4*schemas.MaxCapabilityBytes))
		if err != nil {
			return "", nil, err
		}
		text = string(b)
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return "", nil, err
		}
		text = string(b)
	}
	var header string
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "{") {
			header = line
			break
		}
	}
	tok, err := readToken(stdin, strings.TrimSpace(text))
	if err != nil {
		if header == "" {
			return "", nil, err
		}
		if tok, err = readToken(stdin, header); err != nil {
			return "", nil, err
		}
	}
	if header == "" {
		if header, err = schemas.EncodeCapabilityHeader(tok); err != nil {
			return "", nil, err
		}
	}
	return header, tok, nil
}

// signerFromFiles is the proof signer for token held by the key in keyFile
// (capability keygen's file).
func signerFromFiles(keyFile, token string) (*dpop.Signer, error) {
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, err
	}
	key, err := schemas.ParsePrivateKey(string(b))
	if err != nil {
		return nil, err
	}
	return dpop.NewSigner(key, token)
}

func newCapabilityProofCmd() *cobra.Command {
	var keyFile, token, method, url string
	var headers, tool bool
	var server, toolName, args string
	cmd := &cobra.Command{
		Use:   "proof --key KEY --token TOKEN --method M --url U",
		Short: "Print a proof of possession of a token's subject key for one request (RFC 9449 DPoP) or one tool call",
		Long: "A token that can delegate (or whose grant has dpop_required, or any token where the server runs with\n" +
			"--require-dpop) is honoured only with a proof by its subject key. Send it as\n" +
			"  Authorization: DPoP <token>\n  DPoP: <proof>\n" +
			"A proof is for one request (method and URL, without the query), is fresh for 60 s and is accepted once.\n" +
			"--headers prints both header lines (for curl -H @FILE). --tool prints a chio.dpop_proof.v1 for a tool\n" +
			"call instead (--server, --tool-name, --args), for transports without an HTTP request (stdio, ACP, MCP _meta).\n" +
			"KEY is the file capability keygen wrote; TOKEN is as for inspect (@FILE, -, or inline).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if keyFile == "" || token == "" {
				return usageError(errors.New("proof: --key and --token are required"))
			}
			text, _, err := readTokenText(cmd.InOrStdin(), token)
			if err != nil {
				return usageError(fmt.Errorf("proof: --token: %w", err))
			}
			s, err := signerFromFiles(keyFile, text)
			if err != nil {
				return usageError(fmt.Errorf("proof: %w", err))
			}
			out := cmd.OutOrStdout()
			if tool {
				if server == "" || toolName == "" {
					return usageError(errors.New("proof --tool: --server and --tool-name are required"))
				}
				tp, err := s.ToolProof(server, toolName, json.RawMessage(args))
				if err != nil {
					return usageError(fmt.Errorf("proof: %w", err))
				}
				raw, _ := json.Marshal(tp)
				fmt.Fprintln(out, string(raw))
				return nil
			}
			if method == "" || url == "" {
				return usageError(errors.New("proof: --method and --url are required"))
			}
			if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
				return usageError(fmt.Errorf("proof: --url %q: want an http:// or https:// URL", url))
			}
			if q := strings.IndexAny(url, "?#"); q >= 0 {
				url = url[:q] // htu has no query or fragment
			}
			p, err := s.Proof(strings.ToUpper(method), url)
			if err != nil {
				return fmt.Errorf("proof: %w", err)
			}
			if headers {
				fmt.Fprintf(out, "Authorization: DPoP %s\n%s: %s\n", text, dpop.Header, p)
				return nil
			}
			fmt.Fprintln(out, p)
			return nil
		},
	}
	cmd.Flags().StringVar(&keyFile, "key", "", "the token's subject key (capability keygen's file)")
	cmd.Flags().StringVar(&token, "token", "", "the token: @FILE, - (stdin) or inline")
	cmd.Flags().StringVar(&method, "method", "", "the request's HTTP method")
	cmd.Flags().StringVar(&url, "url", "", "the request's URL (scheme, host, path)")
	cmd.Flags().BoolVar(&headers, "headers", false, "print the Authorization and DPoP header lines")
	cmd.Flags().BoolVar(&tool, "tool", false, "print a chio.dpop_proof.v1 for one tool call instead")
	cmd.Flags().StringVar(&server, "server", "", "--tool: the tool server id")
	cmd.Flags().StringVar(&toolName, "tool-name", "", "--tool: the tool name")
	cmd.Flags().StringVar(&args, "args", "{}", "--tool: the call's arguments (a JSON object)")
	return cmd
}

func newCapabilityAncestorCmd() *cobra.Command {
	var depth int
	cmd := &cobra.Command{
		Use:   "ancestor TOKEN [--depth N]",
		Short: "Print an ancestor of a delegated token, rebuilt from its delegation chain (header form)",
		Long: "A delegated token carries each ancestor's signed fields, so that delegation verifies offline; the\n" +
			"ancestor rebuilt from them is the ancestor's token, byte for byte. Anyone holding a child can do this:\n" +
			"it is why a token that can delegate is honoured only with a proof of possession of its subject key.\n" +
			"--depth 1 (the default) is the parent, 2 the grandparent, and so on.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := readToken(cmd.InOrStdin(), args[0])
			if err != nil {
				return usageError(fmt.Errorf("ancestor: %w", err))
			}
			n := len(tok.DelegationChain)
			if depth < 1 || depth > n {
				return usageError(fmt.Errorf("ancestor: --depth %d: the token has %d ancestor(s)", depth, n))
			}
			h, err := schemas.EncodeCapabilityHeader(tok.Ancestor(n - depth))
			if err != nil {
				return fmt.Errorf("ancestor: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), h)
			return nil
		},
	}
	cmd.Flags().IntVar(&depth, "depth", 1, "how many steps up the chain")
	return cmd
}

func newCapabilityInspectCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect TOKEN",
		Short: "Decode a token, check its signatures and delegation chain offline, and print it",
		Long: "TOKEN is JSON, header form (base64url), @FILE or - for stdin. Prints the token as indented JSON, then\n" +
			"one line per check: its signature, each ancestor's signature and scope hash, and that each step only\n" +
			"narrows its parent. Whether the root issuer is trusted, and revocation, are the kernel's questions.\n" +
			"Exits 1 if a check fails.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := readToken(cmd.InOrStdin(), args[0])
			if err != nil {
				return usageError(fmt.Errorf("inspect: %w", err))
			}
			out := cmd.OutOrStdout()
			pretty, _ := json.MarshalIndent(tok, "", "  ")
			fmt.Fprintln(out, string(pretty))
			window := fmt.Sprintf("%s .. %s", time.Unix(int64(tok.IssuedAt), 0).UTC().Format(time.RFC3339), time.Unix(int64(tok.ExpiresAt), 0).UTC().Format(time.RFC3339))
			fmt.Fprintf(out, "id %s, subject %s, valid %s, %d grant(s), delegation depth %d\n",
				tok.ID, tok.Subject, window, len(tok.Scope.Grants), len(tok.DelegationChain))
			principals := tok.Principals()
			fmt.Fprintf(out, "principal %s (tenant %s)\n", principals[len(principals)-1], principals[0])
			failed := false
			check := func(what string, err error) {
				if err != nil {
					failed = true
					fmt.Fprintf(out, "FAIL %s: %v\n", what, err)
					return
				}
				fmt.Fprintf(out, "ok   %s\n", what)
			}
			check("signature by issuer "+tok.Issuer, tok.VerifySignature())
			prev := (*schemas.CapabilityToken)(nil)
			for i := range tok.DelegationChain {
				a := tok.Ancestor(i)
				l := tok.DelegationChain[i]
				h, err := schemas.ScopeHash(l.Scope)
				if err == nil && h != l.ScopeHash {
					err = errors.New("scope_hash does not match the link's scope")
				}
				check(fmt.Sprintf("ancestor %d (%s) scope hash", i, a.ID), err)
				check(fmt.Sprintf("ancestor %d (%s) signature by %s", i, a.ID, a.Issuer), a.VerifySignature())
				if prev != nil {
					check(fmt.Sprintf("ancestor %d narrows ancestor %d", i, i-1), narrowsParent(prev, a))
				}
				prev = a
			}
			if prev != nil {
				check("token narrows its parent "+prev.ID, narrowsParent(prev, tok))
			}
			if failed {
				return &exitError{code: 1, err: errors.New("inspect: the token does not verify")}
			}
			return nil
		},
	}
}

func narrowsParent(parent, child *schemas.CapabilityToken) error {
	if child.Issuer != parent.Subject {
		return fmt.Errorf("issued by %s, not by the parent's subject %s", child.Issuer, parent.Subject)
	}
	return schemas.CheckAttenuation(&parent.CapabilityBody, &child.CapabilityBody)
}

func newCapabilityRevokeCmd() *cobra.Command {
	var natsURL, reason string
	var na natsauth.Client
	var replicas int
	cmd := &cobra.Command{
		Use:   "revoke ID [--nats URL] [--reason TEXT]",
		Short: "Revoke a capability (and so every token delegated from it) on every edge replica",
		Long: "Writes the revocation to the " + schemas.RevocationsBucket + " JetStream KV bucket, which every kernel watches;\n" +
			"calls presenting the capability, or any token delegated from it, are denied from then on.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !schemas.ValidID(args[0]) {
				return usageError(fmt.Errorf("revoke: %q is not a capability id", args[0]))
			}
			nc, js, err := connectNATS(natsURL, "chio-capability-revoke", natsauth.Operator, &na)
			if err != nil {
				return err
			}
			defer nc.Close()
			if err := kernel.Revoke(cmd.Context(), js, replicas, args[0], reason, time.Now()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked %s\n", args[0])
			return nil
		},
	}
	cmd.Flags().StringVar(&natsURL, "nats", nats.DefaultURL, "NATS server URL")
	registerNATSAuth(cmd.Flags(), &na)
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the revocation)")
	cmd.Flags().IntVar(&replicas, "replicas", 1, "replicas of the revocations bucket if it must be created")
	return cmd
}
