package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/chio-ledger/chio/edges/a2aadapter"
	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	mcpedge "github.com/chio-ledger/chio/edges/mcp"
	"github.com/chio-ledger/chio/edges/openai"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// The environment variables that may hold the adapter's secrets (a flag
// naming a file wins).
const (
	a2aBearerEnv       = "CHIO_A2A_BEARER_TOKEN"
	a2aBasicPassEnv    = "CHIO_A2A_BASIC_PASSWORD"
	a2aOAuthSecretEnv  = "CHIO_A2A_OAUTH_CLIENT_SECRET"
	a2aDiscoverTimeout = 30 * time.Second
)

// a2aFlags configure the adapter for one or more partner agents: the
// credentials it may present, the partner admission policy and the
// adapter-level extras.
type a2aFlags struct {
	bearerFile      string
	bearerKey       string
	basicUser       string
	basicPassFile   string
	apiKeys         []string
	oauthClientID   string
	oauthSecretFile string
	oauthScopes     []string
	caFile          string
	clientCert      string
	clientKey       string
	headers         []string
	query           []string
	cookies         []string
	partner         string
	requiredTenant  string
	requireSkills   []string
	requireSchemes  []string
	allowOrigins    []string
	partnerServerID string
}

// register adds the flags, each under prefix ("a2a-" on chio up).
func (a *a2aFlags) register(f *pflag.FlagSet, prefix string) {
	n := func(s string) string { return prefix + s }
	f.StringVar(&a.bearerFile, n("bearer-file"), "", "file holding the bearer token for cards that declare a bearer (or OAuth2/OpenID) scheme (default $"+a2aBearerEnv+")")
	f.StringVar(&a.bearerKey, n("bearer-key"), "", "the bearer capability's subject key (capability keygen's file): each request proves possession of it with a DPoP proof, as a Chio partner requires of a capability that can delegate")
	f.StringVar(&a.basicUser, n("basic-user"), "", "HTTP Basic user, for cards that declare Basic")
	f.StringVar(&a.basicPassFile, n("basic-password-file"), "", "file holding the HTTP Basic password (default $"+a2aBasicPassEnv+")")
	f.StringArrayVar(&a.apiKeys, n("api-key"), nil, "API key for the card's apiKey scheme NAME, read from a file: 'NAME=@file'; NAME * for any (repeatable)")
	f.StringVar(&a.oauthClientID, n("oauth-client-id"), "", "OAuth2 client id for client credentials at the card's token URL (or its OpenID provider)")
	f.StringVar(&a.oauthSecretFile, n("oauth-client-secret-file"), "", "file holding the OAuth2 client secret (default $"+a2aOAuthSecretEnv+")")
	f.StringArrayVar(&a.oauthScopes, n("oauth-scope"), nil, "OAuth2 scope added to the card's (repeatable)")
	f.StringVar(&a.caFile, n("ca-file"), "", "PEM file of the CA certificates the partner's (and token endpoints') TLS is checked against")
	f.StringVar(&a.clientCert, n("client-cert"), "", "PEM client certificate chain, for cards that declare mutual TLS")
	f.StringVar(&a.clientKey, n("client-key"), "", "PEM client key, with --"+n("client-cert"))
	f.StringArrayVar(&a.headers, n("header"), nil, "extra header on every request to the partner, 'Name=value' or 'Name=@file' (repeatable)")
	f.StringArrayVar(&a.query, n("query"), nil, "extra query parameter, 'name=value' (repeatable)")
	f.StringArrayVar(&a.cookies, n("cookie"), nil, "extra cookie, 'name=value' (repeatable)")
	f.StringVar(&a.partner, n("partner"), "", "the partner's name, recorded with its tasks")
	f.StringVar(&a.requiredTenant, n("required-tenant"), "", "admission: the chosen interface must advertise this tenant")
	f.StringArrayVar(&a.requireSkills, n("require-skill"), nil, "admission: the card must expose this skill id (repeatable)")
	f.StringArrayVar(&a.requireSchemes, n("require-scheme"), nil, "admission: the card must declare and require this security scheme (repeatable)")
	f.StringArrayVar(&a.allowOrigins, n("allow-origin"), nil, "admission: an interface must be served from this origin (repeatable)")
	f.StringVar(&a.partnerServerID, n("partner-server-id"), "", "the partner's Chio server id, when it is a Chio edge: calls then carry the extended call chain as a governed intent")
}

// secret reads a file flag, else the environment variable.
func secret(file, env string) (string, error) {
	if file == "" {
		return os.Getenv(env), nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", file, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", usageError(fmt.Errorf("%s is empty", file))
	}
	return s, nil
}

// pairValue reads 'name=value' or 'name=@file'.
func pairValue(flag, s string) (string, string, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return "", "", usageError(fmt.Errorf("%s %q: want 'name=value' or 'name=@file'", flag, name))
	}
	if path, ok := strings.CutPrefix(value, "@"); ok {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", "", fmt.Errorf("%s %s: %w", flag, name, err)
		}
		value = strings.TrimSpace(string(b))
	}
	return name, value, nil
}

// credentials builds what the adapter may present.
func (a *a2aFlags) credentials() (auth.Credentials, error) {
	var c auth.Credentials
	var err error
	if c.Bearer, err = secret(a.bearerFile, a2aBearerEnv); err != nil {
		return c, err
	}
	if a.bearerKey != "" {
		if c.Bearer == "" {
			return c, usageError(errors.New("--bearer-key proves possession of the bearer capability: give it with --bearer-file"))
		}
		b, err := os.ReadFile(a.bearerKey)
		if err != nil {
			return c, fmt.Errorf("--bearer-key: %w", err)
		}
		if c.BearerKey, err = schemas.ParsePrivateKey(string(b)); err != nil {
			return c, usageError(fmt.Errorf("--bearer-key: %w", err))
		}
		if _, err := dpop.NewSigner(c.BearerKey, c.Bearer); err != nil {
			return c, usageError(fmt.Errorf("--bearer-key: %w", err))
		}
	}
	if a.basicUser != "" {
		pass, err := secret(a.basicPassFile, a2aBasicPassEnv)
		if err != nil {
			return c, err
		}
		c.Basic = &auth.Basic{User: a.basicUser, Password: pass}
	}
	for _, kv := range a.apiKeys {
		if name, value, _ := strings.Cut(kv, "="); !strings.HasPrefix(value, "@") {
			// A key on the command line is in ps and the shell history.
			return c, usageError(fmt.Errorf("--api-key %s: give the key as NAME=@file", name))
		}
		name, value, err := pairValue("--api-key", kv)
		if err != nil {
			return c, err
		}
		if c.APIKeys == nil {
			c.APIKeys = map[string]string{}
		}
		c.APIKeys[name] = value
	}
	if a.oauthClientID != "" {
		sec, err := secret(a.oauthSecretFile, a2aOAuthSecretEnv)
		if err != nil {
			return c, err
		}
		c.OAuth2 = &auth.ClientCredentials{ClientID: a.oauthClientID, ClientSecret: sec, Scopes: a.oauthScopes}
	}
	if c.TLS, err = a.tlsConfig(); err != nil {
		return c, err
	}
	for _, kv := range a.headers {
		name, value, err := pairValue("--header", kv)
		if err != nil {
			return c, err
		}
		if c.Headers == nil {
			c.Headers = http.Header{}
		}
		c.Headers.Add(name, value)
	}
	for _, kv := range a.query {
		name, value, err := pairValue("--query", kv)
		if err != nil {
			return c, err
		}
		if c.Query == nil {
			c.Query = url.Values{}
		}
		c.Query.Add(name, value)
	}
	for _, kv := range a.cookies {
		name, value, err := pairValue("--cookie", kv)
		if err != nil {
			return c, err
		}
		c.Cookies = append(c.Cookies, &http.Cookie{Name: name, Value: value})
	}
	return c, nil
}

// tlsConfig is the partner's CA and the client identity, if configured.
func (a *a2aFlags) tlsConfig() (*auth.TLS, error) {
	if a.caFile == "" && a.clientCert == "" && a.clientKey == "" {
		return nil, nil
	}
	t := &auth.TLS{}
	if a.caFile != "" {
		pem, err := os.ReadFile(a.caFile)
		if err != nil {
			return nil, fmt.Errorf("read --ca-file: %w", err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageError(fmt.Errorf("--ca-file %s holds no PEM certificate", a.caFile))
		}
	}
	if (a.clientCert == "") != (a.clientKey == "") {
		return nil, usageError(errors.New("--client-cert and --client-key go together"))
	}
	if a.clientCert != "" {
		cert, err := tls.LoadX509KeyPair(a.clientCert, a.clientKey)
		if err != nil {
			return nil, fmt.Errorf("load the client certificate: %w", err)
		}
		t.ClientCert = &cert
	}
	return t, nil
}

// discoveryClient fetches cards: the configured CA, no credentials and no
// client certificate (shown only to a card that asks for mutual TLS), and
// no redirect to another origin.
func discoveryClient(t *auth.TLS) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if t != nil {
		tr.TLSClientConfig = &tls.Config{RootCAs: t.RootCAs, MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Transport: tr, Timeout: a2aDiscoverTimeout, CheckRedirect: func(r *http.Request, via []*http.Request) error {
		if len(via) >= 5 || r.URL.Scheme != via[0].URL.Scheme || r.URL.Host != via[0].URL.Host {
			return fmt.Errorf("card fetch redirected to %s: only redirects on the same origin are followed", r.URL.Redacted())
		}
		return nil
	}}
}

// configured reports whether any credential, extra, policy or partner
// flag is set: these describe one partner.
func (a *a2aFlags) configured() bool {
	return a.bearerFile != "" || a.bearerKey != "" || a.basicUser != "" || len(a.apiKeys) > 0 || a.oauthClientID != "" || a.clientCert != "" ||
		len(a.headers) > 0 || len(a.query) > 0 || len(a.cookies) > 0 || a.requiredTenant != "" || len(a.requireSkills) > 0 ||
		len(a.requireSchemes) > 0 || len(a.allowOrigins) > 0 || a.partnerServerID != "" || os.Getenv(a2aBearerEnv) != ""
}

// discover builds the adapter of one target.
func (a *a2aFlags) discover(ctx context.Context, target string, tasks *a2aadapter.TaskRegistry) (*a2aadapter.Adapter, error) {
	creds, err := a.credentials()
	if err != nil {
		return nil, err
	}
	origins := a.allowOrigins
	if len(origins) == 0 {
		// Credentials go to the target's own origin unless the operator
		// names others: a card may list interfaces anywhere.
		u, err := url.Parse(target)
		if err != nil || u.Host == "" {
			return nil, usageError(fmt.Errorf("target %q is not a URL", target))
		}
		origins = []string{u.Scheme + "://" + u.Host}
	}
	return a2aadapter.Discover(ctx, a2aadapter.Config{
		Target: target, Discovery: discoveryClient(creds.TLS), Authorize: creds.Authorize, Tasks: tasks,
		PartnerServerID: a.partnerServerID,
		Policy: a2aadapter.Policy{Partner: a.partner, RequiredTenant: a.requiredTenant, RequireSkills: a.requireSkills,
			RequireSchemes: a.requireSchemes, AllowOrigins: origins},
	})
}

// adapters discovers every target, with the task registry on js.
func (a *a2aFlags) adapters(ctx context.Context, js jetstream.JetStream, replicas int, targets []string, opts ...a2aadapter.RegistryOption) ([]tools.Server, error) {
	if len(targets) == 0 {
		return nil, nil
	}
	if len(targets) > 1 && a.configured() {
		// The flags describe one partner: with two targets, one partner's
		// credentials would go to the other.
		return nil, usageError(errors.New("credential, extra and policy flags describe one partner: give one target per process (chio a2a serve) when any is set"))
	}
	tasks, err := a2aadapter.OpenTaskRegistry(ctx, js, max(replicas, 1), opts...)
	if err != nil {
		return nil, err
	}
	var out []tools.Server
	for _, t := range targets {
		ad, err := a.discover(ctx, t, tasks)
		if err != nil {
			return nil, fmt.Errorf("a2a target %s: %w", t, err)
		}
		out = append(out, ad)
	}
	return out, nil
}

func newA2ACmd() *cobra.Command {
	cmd := &cobra.Command{Use: "a2a", Short: "Govern calls to remote A2A agents"}
	var af a2aFlags
	discover := &cobra.Command{
		Use:   "discover URL",
		Short: "Read a remote A2A agent's card and print the tools its skills become and the admission verdict",
		Long: "URL is the agent's base URL (its /.well-known/agent-card.json is read) or the card's own URL. https is\n" +
			"required except for loopback hosts. Prints a JSON report: the card, the interface chosen, one tool per\n" +
			"skill, the authentication plan and the partner policy's verdict; a policy failure is an error naming it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ad, err := af.discover(cmd.Context(), args[0], nil)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(ad.Report())
		},
	}
	af.register(discover.Flags(), "")
	cmd.AddCommand(discover, newA2AServeCmd(), newA2ASendCmd())
	return cmd
}

func newA2AServeCmd() *cobra.Command {
	var af a2aFlags
	var ef edgeFlags
	var targets []string
	var natsURL, listen string
	var maxLive int
	cmd := &cobra.Command{
		Use:   "serve --target URL [--partner NAME] --nats URL --listen ADDR (--policy FILE | --issuer-pub FILE)",
		Short: "Serve a remote A2A agent's skills as governed tools (MCP at /mcp, OpenAI function calling at /openai/v1)",
		Long: "Each skill of each --target becomes a tool of server a2a:<host>; a call runs through the kernel (capability,\n" +
			"guards, durable decision) and then reaches the partner, with a receipt. Follow-ups (get_task,\n" +
			"subscribe_task, cancel_task, the push config family) are accepted only for tasks this adapter saw for the\n" +
			"same tool, interface and tenant (a JetStream KV registry shared by replicas).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			stopTracing, err := ef.startTracing(ctx, "chio-a2a-serve")
			if err != nil {
				return err
			}
			defer stopTracing() // last: after everything that makes spans
			if len(targets) == 0 {
				return usageError(errors.New("--target is required"))
			}
			sa, err := connectStandalone(natsURL, "", "chio-a2a-serve", false, &ef.natsAuth)
			if err != nil {
				return err
			}
			defer sa.close()
			servers, err := af.adapters(ctx, sa.js, ef.replicas, targets, a2aadapter.WithMaxLiveTasks(maxLive))
			if err != nil {
				return err
			}
			ef.servers = append(ef.servers, servers...)
			if err := sa.govern(ctx, &ef); err != nil {
				return err
			}
			g := sa.g
			ec := newEdgeEcho()
			mcpedge.New(g.kernel, g.registry, g.dispatch, mcpedge.WithExposure(g.policy.ToolExposure("mcp", ef.exposeAll)), mcpedge.WithAuthorizationServers(g.policy.Issuers()),
				mcpedge.WithPublicOrigin(ef.publicURL)).Register(ec)
			openai.New(g.kernel, g.registry, g.dispatch, openai.WithExposure(g.policy.ToolExposure("openai", ef.exposeAll)),
				openai.WithPublicOrigin(ef.publicURL)).Register(ec)
			ln, err := sa.listenHTTP(ec, listen)
			if err != nil {
				return err
			}
			for _, s := range servers {
				fmt.Fprintf(cmd.OutOrStdout(), "chio a2a serve: %s: %s\n", s.ServerID(), strings.Join(s.ToolNames(), ", "))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chio a2a serve: MCP http://%s%s, OpenAI http://%s%s\n", ln.Addr(), mcpedge.Path, ln.Addr(), openai.ToolsPath)
			return serveTraced(ctx, ec, ef.tracer, ln, ef.drainTimeout)
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&targets, "target", nil, "the partner agent's base URL or card URL (repeatable)")
	af.register(f, "")
	f.StringVar(&natsURL, "nats", "", "NATS server URL(s) (default "+nats.DefaultURL+")")
	f.StringVar(&listen, "listen", "127.0.0.1:8085", "HTTP listen address")
	f.IntVar(&maxLive, "max-live-tasks", a2aadapter.DefaultMaxLiveTasks, "tasks one caller may hold unended on the partners at once, over every replica; one more send is refused before the partner is asked (0: no bound)")
	registerGovernanceFlags(f, &ef)
	return cmd
}

func newToolsCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tools", Short: "Inspect the tools an edge serves"}
	var base, token, server, keyFile string
	var all, manifests bool
	list := &cobra.Command{
		Use:   "list --url URL [--server ID] [--token TOKEN|@FILE [--key KEY]] [--all | --manifests]",
		Short: "List the tools a capability may call on a running edge (its MCP tools/list), or, with --all, every server and tool",
		Long: "By default it lists the tools the capability may call, as the edge's MCP tools/list shows them.\n\n" +
			"With --all (an operator's credential: chio up writes DATA_DIR/" + operatorTokenFile + ") it lists every server\n" +
			"and tool of the edge's registry (" + tools.ListingPath + "), exposed or not: its origin (in-process, openapi,\n" +
			"mcp, a2a-partner, worker, manifest), the audiences it is exposed to (a2a, mcp, openai, acp; \"internal\"\n" +
			"for the namespaces never exposed), its A2A and ACP fidelity, and the hash of its manifest.\n\n" +
			"With --manifests it prints each server's current chio.signed_manifest.v1 document, one per line:\n" +
			"receipts name its manifest_hash as metadata.manifest.hash, and chio verify --manifest checks it.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			tok := token
			if path, ok := strings.CutPrefix(token, "@"); ok {
				b, err := os.ReadFile(path)
				if err != nil {
					return fmt.Errorf("--token: %w", err)
				}
				tok = strings.TrimSpace(string(b))
			}
			u, err := url.Parse(base)
			if err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && loopbackHost(u.Hostname()))) {
				// A capability sent in clear over the network is anyone's.
				return usageError(fmt.Errorf("--url %q: want https, or http to a loopback host", base))
			}
			if all || manifests {
				if all && manifests {
					return usageError(errors.New("--all and --manifests are two views: give one"))
				}
				client := http.DefaultClient
				if keyFile != "" {
					s, err := signerFromFiles(keyFile, tok)
					if err != nil {
						return usageError(fmt.Errorf("--key: %w", err))
					}
					client = &http.Client{Transport: &dpop.Transport{Signer: s}}
				}
				l, err := fetchListing(cmd.Context(), client, base, tok)
				if err != nil {
					return err
				}
				if all {
					printListing(cmd.OutOrStdout(), l, server)
					return nil
				}
				for _, s := range l.Servers {
					if server != "" && s.ServerID != server {
						continue
					}
					b, err := json.Marshal(s.SignedManifest)
					if err != nil {
						return err
					}
					fmt.Fprintln(cmd.OutOrStdout(), string(b))
				}
				return nil
			}
			endpoint := strings.TrimSuffix(base, "/") + mcpedge.Path
			var listed []mcpedge.ListedTool
			if keyFile != "" {
				if tok == "" {
					return usageError(errors.New("--key proves possession of the --token capability's subject key: give --token"))
				}
				s, err := signerFromFiles(keyFile, tok)
				if err != nil {
					return usageError(fmt.Errorf("--key: %w", err))
				}
				listed, err = mcpedge.ListToolsWith(cmd.Context(), endpoint, &http.Client{Transport: &dpop.Transport{Signer: s}})
				if err != nil {
					return err
				}
			} else if listed, err = mcpedge.ListTools(cmd.Context(), endpoint, tok); err != nil {
				return err
			}
			for _, t := range listed {
				if server != "" && t.ServerID != server {
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s\t%s/%s\t%s\n", t.Name, t.ServerID, t.ToolName, t.Description)
			}
			return nil
		},
	}
	list.Flags().StringVar(&base, "url", "http://127.0.0.1:8080", "the edge's base URL (chio up, chio a2a serve, chio bridge openapi)")
	list.Flags().StringVar(&token, "token", "", "capability (or @FILE); none: the edge's dev capability, if it has one")
	list.Flags().StringVar(&server, "server", "", "only this server's tools, e.g. a2a:agent.example.com")
	list.Flags().StringVar(&keyFile, "key", "", "the capability's subject key: every request carries a DPoP proof (needed when the capability can delegate)")
	list.Flags().BoolVar(&all, "all", false, "every server and tool with its origin, exposure, fidelity and manifest hash (an operator credential)")
	list.Flags().BoolVar(&manifests, "manifests", false, "each server's signed manifest (chio.signed_manifest.v1), one JSON document per line (an operator credential)")
	cmd.AddCommand(list)
	return cmd
}
