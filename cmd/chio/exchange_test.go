package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"

	"github.com/chio-ledger/chio/edges/exchange"
	"github.com/chio-ledger/chio/internal/authtest"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// exchangeForm posts an RFC 8693 request to chio up's token endpoint,
// with a DPoP proof by key when key is set, and returns the status and
// the decoded answer.
func exchangeForm(t *testing.T, endpoint string, form url.Values, key ed25519.PrivateKey) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if key != nil {
		proof, err := dpop.TokenRequestProof(key, endpoint)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(dpop.Header, proof)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("token endpoint %d: not JSON: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// chio up exchanges an identity provider's access token for a chio
// capability (RFC 8693): a client-credentials token of zitadel's provider
// and a DPoP proof get a short-lived capability bound to the proof's key,
// which calls a skill with the a2a-go client; a subject token with an act
// claim and an actor token get a capability whose delegation chain names
// the subject and each actor, root first. Bad requests are refused in
// RFC 6749's form, and run nothing.
func TestUpExchangesAccessTokensForCapabilities(t *testing.T) {
	o := authtest.StartOP(t, "agent-7", "secret-7")
	is := authtest.StartIssuer(t)
	up := startUp(t, "--require-capability", "--oidc-issuer", o.Issuer, "--oidc-issuer", is.URL, "--oidc-audience", "agent-7",
		"--oidc-grant", "sub=agent-7:hello-a2a-srv/*", "--oidc-ca", o.CAFile(t))
	endpoint := up.httpURL + exchange.Path
	pubText, err := os.ReadFile(filepath.Join(up.dir, "keys", issuerPubFile))
	if err != nil {
		t.Fatal(err)
	}
	issuerPub := strings.TrimSpace(string(pubText))
	call := func(t *testing.T, hc *http.Client, text string) string {
		t.Helper()
		client, err := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
			a2aclient.WithJSONRPCTransport(hc))
		if err != nil {
			t.Fatal(err)
		}
		task := sendTask(t, client, text)
		if task.Status.State != a2apb.TaskStateCompleted {
			t.Fatalf("task %+v", task)
		}
		rid, _ := task.Metadata["chio"].(map[string]any)["receiptId"].(string)
		return rid
	}

	t.Run("bound to the caller's key", func(t *testing.T) {
		_, key, _ := ed25519.GenerateKey(rand.Reader)
		code, out := exchangeForm(t, endpoint, url.Values{"grant_type": {exchange.GrantType},
			"subject_token": {o.AccessToken(t)}, "subject_token_type": {exchange.TokenTypeAccess}}, key)
		if code != http.StatusOK || out["issued_token_type"] != exchange.TokenTypeCapability || out["token_type"] != "DPoP" {
			t.Fatalf("exchange: %d %v", code, out)
		}
		if exp, _ := out["expires_in"].(float64); exp <= 0 || exp > exchange.DefaultLifetime.Seconds() {
			t.Fatalf("expires_in %v", out["expires_in"])
		}
		text := out["access_token"].(string)
		tok := parseCapabilityText(t, text)
		// Issued to the identity's key under the issuer, and delegated on
		// to the proof's key.
		if len(tok.DelegationChain) != 1 || tok.DelegationChain[0].Delegator != issuerPub || tok.Subject != schemas.EncodePublicKey(key.Public().(ed25519.PublicKey)) ||
			len(tok.Scope.Grants) != 1 || tok.Scope.Grants[0].DPoPRequired == nil || !*tok.Scope.Grants[0].DPoPRequired {
			t.Fatalf("issued capability %+v", tok.CapabilityBody)
		}
		// Without the key's proofs the capability is refused; with them it
		// calls the skill, and the receipt says it was proved.
		bare := &http.Client{Transport: bearer{token: text, next: http.DefaultTransport}, Timeout: 30 * time.Second}
		client, _ := a2aclient.NewFromEndpoints(t.Context(), []*a2apb.AgentInterface{a2apb.NewAgentInterface(up.httpURL+"/a2a", a2apb.TransportProtocolJSONRPC)},
			a2aclient.WithJSONRPCTransport(bare))
		if _, err := client.SendMessage(t.Context(), &a2apb.SendMessageRequest{Message: a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart("bare"))}); err == nil {
			t.Fatal("a DPoP-bound capability was taken as a bearer token")
		}
		s, err := dpop.NewSigner(key, text)
		if err != nil {
			t.Fatal(err)
		}
		rid := call(t, &http.Client{Transport: &dpop.Transport{Signer: s}, Timeout: 30 * time.Second}, "exchanged")
		r := awaitLogReceipt(t, up.httpURL, up.token, rid)
		if r.Metadata.Attribution.Binding == nil || r.Metadata.Attribution.Binding.Method != "dpop" || r.Metadata.Attribution.IssuerKey != tok.Issuer {
			t.Fatalf("receipt attribution %+v", r.Metadata.Attribution)
		}
	})

	t.Run("actors become the delegation chain", func(t *testing.T) {
		exp := time.Now().Add(time.Hour).Unix()
		subject := is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "agent-7", "exp": exp,
			"act": map[string]any{"sub": "planner"}})
		actor := is.Sign(t, map[string]any{"iss": is.URL, "sub": "runner", "aud": "agent-7", "exp": exp})
		code, out := exchangeForm(t, endpoint, url.Values{"grant_type": {exchange.GrantType},
			"subject_token": {subject}, "subject_token_type": {exchange.TokenTypeJWT},
			"actor_token": {actor}, "actor_token_type": {exchange.TokenTypeJWT}}, nil)
		if code != http.StatusOK || out["token_type"] != "Bearer" {
			t.Fatalf("exchange with an actor: %d %v", code, out)
		}
		text := out["access_token"].(string)
		tok := parseCapabilityText(t, text)
		// Root first: the exchange's key to the subject, the subject to
		// the planner, the planner to the runner (the holder).
		if len(tok.DelegationChain) != 2 || tok.DelegationChain[0].Delegator != issuerPub {
			t.Fatalf("delegation chain %+v", tok.DelegationChain)
		}
		if tok.DelegationChain[1].Delegator != tok.DelegationChain[0].Delegatee || tok.Issuer != tok.DelegationChain[1].Delegatee {
			t.Fatalf("the chain does not link: %+v, issued by %s", tok.DelegationChain, tok.Issuer)
		}
		out2, err := chio(t.Context(), "capability", "inspect", text)
		if err != nil || strings.Contains(out2, "FAIL") {
			t.Fatalf("chio capability inspect: %v\n%s", err, out2)
		}
		rid := call(t, &http.Client{Transport: bearer{token: text, next: http.DefaultTransport}, Timeout: 30 * time.Second}, "acted for")
		r := awaitLogReceipt(t, up.httpURL, up.token, rid)
		if r.Metadata.Attribution.DelegationDepth != 2 || r.Metadata.Attribution.IssuerKey != tok.Issuer {
			t.Fatalf("receipt attribution %+v", r.Metadata.Attribution)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		good := func() url.Values {
			return url.Values{"grant_type": {exchange.GrantType}, "subject_token": {o.AccessToken(t)}, "subject_token_type": {exchange.TokenTypeAccess}}
		}
		stranger := authtest.StartIssuer(t)
		exp := time.Now().Add(time.Hour).Unix()
		_, other, _ := ed25519.GenerateKey(rand.Reader)
		boundToOther := is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "agent-7", "exp": exp,
			"cnf": map[string]any{"jkt": dpop.Thumbprint(other.Public().(ed25519.PublicKey))}})
		_, mine, _ := ed25519.GenerateKey(rand.Reader)
		cases := []struct {
			name   string
			form   func() url.Values
			key    ed25519.PrivateKey
			status int
			code   string
		}{
			{"no grant type", func() url.Values { f := good(); f.Del("grant_type"); return f }, nil, 400, "invalid_request"},
			{"another grant", func() url.Values { f := good(); f.Set("grant_type", "client_credentials"); return f }, nil, 400, "unsupported_grant_type"},
			{"no subject token", func() url.Values { f := good(); f.Del("subject_token"); return f }, nil, 400, "invalid_request"},
			{"a subject token of another type", func() url.Values {
				f := good()
				f.Set("subject_token_type", "urn:ietf:params:oauth:token-type:saml2")
				return f
			}, nil, 400, "invalid_request"},
			{"a capability as the subject", func() url.Values {
				f := good()
				f.Set("subject_token_type", exchange.TokenTypeCapability)
				return f
			}, nil, 400, "invalid_request"},
			{"another issued type", func() url.Values { f := good(); f.Set("requested_token_type", exchange.TokenTypeJWT); return f }, nil, 400, "invalid_target"},
			{"a bound actor token", func() url.Values {
				f := good()
				f.Set("actor_token", boundToOther)
				f.Set("actor_token_type", exchange.TokenTypeJWT)
				return f
			}, nil, 400, "invalid_request"},
			{"a parameter twice", func() url.Values { f := good(); f.Add("subject_token", "x"); return f }, nil, 400, "invalid_request"},
			{"an untrusted provider's token", func() url.Values {
				f := good()
				f.Set("subject_token", stranger.Sign(t, map[string]any{"iss": stranger.URL, "sub": "agent-7", "aud": "agent-7", "exp": exp}))
				return f
			}, nil, 400, "invalid_request"},
			{"a subject no rule maps", func() url.Values {
				f := good()
				f.Set("subject_token", is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-8", "aud": "agent-7", "exp": exp}))
				return f
			}, nil, 400, "invalid_request"},
			{"a bound subject token without its proof", func() url.Values { f := good(); f.Set("subject_token", boundToOther); return f }, nil, 400, "invalid_dpop_proof"},
			{"a bound subject token with another key's proof", func() url.Values { f := good(); f.Set("subject_token", boundToOther); return f }, mine, 400, "invalid_dpop_proof"},
			{"an actor token of an untrusted provider", func() url.Values {
				f := good()
				f.Set("actor_token", stranger.Sign(t, map[string]any{"iss": stranger.URL, "sub": "runner", "aud": "agent-7", "exp": exp}))
				f.Set("actor_token_type", exchange.TokenTypeJWT)
				return f
			}, nil, 400, "invalid_request"},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				code, out := exchangeForm(t, endpoint, c.form(), c.key)
				if code != c.status || out["error"] != c.code || out["access_token"] != nil {
					t.Fatalf("%d %v, want %d %s", code, out, c.status, c.code)
				}
				if d, _ := out["error_description"].(string); d == "" {
					t.Fatalf("no error_description: %v", out)
				}
			})
		}
		// A revoked access token is not exchanged: its id is the one its
		// receipts name, and chio capability revoke revokes.
		revoked := is.Sign(t, map[string]any{"iss": is.URL, "sub": "agent-7", "aud": "agent-7", "exp": exp, "jti": "leaked-1"})
		id := (&identity.Caller{Issuer: is.URL, Subject: "agent-7", TokenID: "leaked-1"}).CapabilityID()
		if out, err := chio(t.Context(), "capability", "revoke", id, "--nats", up.natsURL, "--nats-nkey", up.nkey(natsauth.Operator)); err != nil {
			t.Fatalf("revoke %s: %v %s", id, err, out)
		}
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			f := good()
			f.Set("subject_token", revoked)
			code, out := exchangeForm(t, endpoint, f, nil)
			if code == http.StatusBadRequest && out["error"] == "invalid_request" && strings.Contains(fmt.Sprint(out["error_description"]), "revoked") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("a revoked token: %d %v", code, out)
			}
		}
		// Not a form, not a POST.
		resp, err := http.Post(endpoint, "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("a JSON body: %d", resp.StatusCode)
		}
		if code, body := httpGet(t, endpoint); code != http.StatusMethodNotAllowed || !strings.Contains(string(body), `"invalid_request"`) {
			t.Fatalf("GET: %d %s", code, body)
		}
	})
}

// parseCapabilityText reads a capability in header form.
func parseCapabilityText(t *testing.T, text string) *schemas.CapabilityToken {
	t.Helper()
	raw, err := schemas.DecodeCapabilityText(text)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := schemas.ParseCapability(raw)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}
