package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/a2aproject/a2a-go/v2/a2aclient/agentcard"
	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// newA2ASendCmd is a client of any A2A agent, chio's edges included: the
// a2a-go SDK's, from the agent's card to SendMessage.
func newA2ASendCmd() *cobra.Command {
	var skill, data, text, token string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "send URL (--data JSON | --text TEXT) [--skill ID] [--token TOKEN|@FILE]",
		Short: "Send one message to an A2A agent with the a2a-go client and print the task or message it answers",
		Long: "URL is the agent's base URL: its card is read from /.well-known/agent-card.json and the client picks an\n" +
			"interface it lists. --data sends a data part (a JSON object, the skill's arguments), --text a text part;\n" +
			"--skill names the skill for a Chio edge (metadata.chio.targetSkillId). --token is sent as a bearer token.\n" +
			"The answer is printed as JSON; a Chio edge's carries metadata.chio.receiptId.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (data == "") == (text == "") {
				return usageError(errors.New("give one of --data and --text"))
			}
			var part *a2a.Part
			if data != "" {
				var args map[string]any
				if err := strictjson.UnmarshalExact([]byte(data), &args); err != nil || args == nil {
					return usageError(fmt.Errorf("--data must be a JSON object: %v", err))
				}
				part = a2a.NewDataPart(args)
			} else {
				part = a2a.NewTextPart(text)
			}
			base, err := url.Parse(args[0])
			if err != nil || base.Host == "" {
				return usageError(fmt.Errorf("URL %q: want the agent's base URL", args[0]))
			}
			// Redirects that leave the agent's origin are refused: the
			// token must not follow them.
			hc := &http.Client{Timeout: timeout, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
				if !sameOrigin(r.URL, base) {
					return fmt.Errorf("refusing a redirect to another origin (%s)", r.URL.Redacted())
				}
				return nil
			}}
			if token != "" {
				t, err := bearerText(cmd.InOrStdin(), token)
				if err != nil {
					return usageError(fmt.Errorf("--token: %w", err))
				}
				hc.Transport = bearerTransport{token: t, origin: base}
			}
			ctx := cmd.Context()
			card, err := agentcard.NewResolver(hc).Resolve(ctx, args[0])
			if err != nil {
				return fmt.Errorf("read the agent card of %s: %w", args[0], err)
			}
			client, err := a2aclient.NewFromCard(ctx, card, a2aclient.WithJSONRPCTransport(hc), a2aclient.WithRESTTransport(hc))
			if err != nil {
				return fmt.Errorf("a2a client for %s: %w", args[0], err)
			}
			msg := a2a.NewMessage(a2a.MessageRoleUser, part)
			if skill != "" {
				msg.Metadata = map[string]any{"chio": map[string]any{"targetSkillId": skill}}
			}
			res, err := client.SendMessage(ctx, &a2a.SendMessageRequest{Message: msg})
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("send: %w", err)}
			}
			out, err := json.Marshal(res)
			if err != nil {
				return fmt.Errorf("encode the answer: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(out))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&skill, "skill", "", "the skill to run (a Chio edge's metadata.chio.targetSkillId)")
	f.StringVar(&data, "data", "", "a data part: the skill's arguments as a JSON object")
	f.StringVar(&text, "text", "", "a text part")
	f.StringVar(&token, "token", "", "a capability token or an identity provider's JWT access token (or @FILE) sent as Authorization: Bearer")
	f.DurationVar(&timeout, "timeout", time.Minute, "bound on the whole exchange")
	return cmd
}

// bearerText is the credential --token names (inline, @FILE or -): an
// identity provider's JWT access token as it is, or a capability in
// header form.
func bearerText(stdin io.Reader, arg string) (string, error) {
	text := arg
	switch {
	case arg == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, 4*schemas.MaxCapabilityBytes))
		if err != nil {
			return "", err
		}
		text = string(b)
	case strings.HasPrefix(arg, "@"):
		b, err := os.ReadFile(arg[1:])
		if err != nil {
			return "", err
		}
		text = string(b)
	}
	if t := strings.TrimSpace(text); identity.LooksLikeJWT(t) {
		return t, nil
	}
	t, _, err := readTokenText(strings.NewReader(text), text)
	return t, err
}

// bearerTransport adds a bearer token to the requests to one origin, the
// agent's: an interface its card names elsewhere gets no token.
type bearerTransport struct {
	token  string
	origin *url.URL
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if sameOrigin(r.URL, b.origin) {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}
