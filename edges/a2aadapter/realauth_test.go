package a2aadapter

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/a2aproject/a2a-go/v2/a2a"

	"github.com/chio-ledger/chio/edges/a2aadapter/auth"
	"github.com/chio-ledger/chio/internal/authtest"
)

// Secrets of the end-to-end auth tests; a request may carry one only where
// the card's chosen scheme puts it.
const (
	e2eBearer       = "bearer-secret-e2e-0001"
	e2eUser         = "partner-user"
	e2ePassword     = "basic-secret-e2e-0002"
	e2eAPIKey       = "apikey-secret-e2e-0003"
	e2eClientID     = "chio-adapter"
	e2eClientSecret = "client-secret-e2e-0004"

	// Where the cards put API keys.
	keyHeader = "X-Partner-Key"
	keyQuery  = "partner_key"
	keyCookie = "partner_session"
	// schemeName is the one scheme each card of TestRealAuthSchemes
	// declares and requires.
	schemeName = "partnerAuth"
)

func e2eSecrets() []string {
	return []string{e2eBearer, e2ePassword, e2eAPIKey, e2eClientSecret,
		base64.StdEncoding.EncodeToString([]byte(e2eUser + ":" + e2ePassword))}
}

// Where a request can carry a credential.
const (
	slotAuthorization = "Authorization header"
	slotHeader        = keyHeader + " header"
	slotQuery         = keyQuery + " query parameter"
	slotCookie        = keyCookie + " cookie"
	slotCert          = "client certificate"
)

// carried is what one A2A request brought to the partner, slot by slot,
// and the partner's verdict on it.
type carried struct {
	slots map[string]string // non-empty slots only
	// rest is every other header, query parameter and cookie.
	rest    string
	verdict error
}

func carriedBy(r *http.Request) carried {
	c := carried{slots: map[string]string{}}
	var rest []string
	set := func(slot string, values []string) {
		if len(values) > 0 && values[0] != "" {
			c.slots[slot] = values[0]
		}
		if len(values) > 1 { // a second copy anywhere is a leak
			rest = append(rest, slot+"="+strings.Join(values[1:], ","))
		}
	}
	for name, values := range r.Header {
		switch name {
		case "Authorization":
			set(slotAuthorization, values)
		case keyHeader:
			set(slotHeader, values)
		case "Cookie":
		default:
			rest = append(rest, name+": "+strings.Join(values, ","))
		}
	}
	for name, values := range r.URL.Query() {
		if name == keyQuery {
			set(slotQuery, values)
		} else {
			rest = append(rest, name+"="+strings.Join(values, ","))
		}
	}
	var cookies []string
	for _, ck := range r.Cookies() {
		if ck.Name == keyCookie {
			cookies = append(cookies, ck.Value)
		} else {
			rest = append(rest, "cookie "+ck.Name+"="+ck.Value)
		}
	}
	set(slotCookie, cookies)
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		c.slots[slotCert] = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	c.rest = strings.Join(rest, "\n")
	return c
}

// recorder is the partner's authentication middleware: it records what each
// A2A request carried and lets check decide.
type recorder struct {
	check func(*http.Request) error
	mu    sync.Mutex
	seen  []carried
}

func (rec *recorder) enforce(r *http.Request) error {
	c := carriedBy(r)
	c.verdict = rec.check(r)
	rec.mu.Lock()
	rec.seen = append(rec.seen, c)
	rec.mu.Unlock()
	return c.verdict
}

func (rec *recorder) requests() []carried {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return slices.Clone(rec.seen)
}

// e2eCredentials holds every kind of credential, so that each case shows
// the card gets only the one it asks for.
func e2eCredentials(roots *x509.CertPool, pk *authtest.PKI) auth.Credentials {
	return auth.Credentials{
		Bearer:  e2eBearer,
		Basic:   &auth.Basic{User: e2eUser, Password: e2ePassword},
		APIKeys: map[string]string{"*": e2eAPIKey},
		OAuth2:  &auth.ClientCredentials{ClientID: e2eClientID, ClientSecret: e2eClientSecret},
		TLS:     &auth.TLS{RootCAs: roots, ClientCert: &pk.Client},
	}
}

// TestRealAuthSchemes has the adapter authenticate with the real
// auth.Credentials.Authorize to a2a-go partners that enforce the one scheme
// their card declares: each send completes, and every A2A request carries
// that scheme's credential in its place and no other. Each case is run
// again with the credential spoiled, to show the partner really refuses.
func TestRealAuthSchemes(t *testing.T) {
	pk := authtest.NewPKI(t, "chio test CA", e2eClientID)
	rogue := authtest.NewPKI(t, "rogue CA", e2eClientID) // same client CN, other CA
	o := authtest.StartOP(t, e2eClientID, e2eClientSecret)
	verifier := o.Verifier(t)
	// Creds trust the partners' CA and the OP's httptest certificate.
	roots := pk.Pool.Clone()
	roots.AddCert(o.Server.Certificate())

	equal := func(what, got, want string) error {
		if got != want {
			return fmt.Errorf("%s is %q", what, got)
		}
		return nil
	}
	apiKeyIn := func(loc a2a.APIKeySecuritySchemeLocation, name string) a2a.SecurityScheme {
		return a2a.APIKeySecurityScheme{Location: loc, Name: name}
	}
	accessToken := func(r *http.Request) error {
		raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			return errors.New("no bearer token")
		}
		tok, err := verifier.Verify(r.Context(), raw)
		if err != nil {
			return err
		}
		return equal("token subject", tok.Subject, e2eClientID)
	}
	forgedToken := func(c *auth.Credentials) { c.OAuth2, c.Bearer = nil, "forged-access-token" }

	tests := []struct {
		name   string
		scheme a2a.SecurityScheme
		scopes []string
		mtls   bool
		// check is the partner's verification of one A2A request.
		check func(*http.Request) error
		// slots are where a request may carry a credential; all others
		// must be empty.
		slots []string
		// spoil breaks the credential; the partner must then refuse.
		spoil func(*auth.Credentials)
		// tokens and discoveries are the OP requests one Discover and
		// send make.
		tokens, discoveries int32
	}{
		{
			name:   "http bearer",
			scheme: a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"},
			check: func(r *http.Request) error {
				return equal("Authorization", r.Header.Get("Authorization"), "Bearer "+e2eBearer)
			},
			slots: []string{slotAuthorization},
			spoil: func(c *auth.Credentials) { c.Bearer = "wrong-bearer" },
		},
		{
			name:   "http basic",
			scheme: a2a.HTTPAuthSecurityScheme{Scheme: "Basic"},
			check: func(r *http.Request) error {
				// BasicAuth accepts only "Basic ...": a bearer fails here.
				user, password, ok := r.BasicAuth()
				if !ok || user != e2eUser || password != e2ePassword {
					return fmt.Errorf("no valid Basic credentials in %q", strings.Fields(r.Header.Get("Authorization") + " -")[0])
				}
				return nil
			},
			slots: []string{slotAuthorization},
			spoil: func(c *auth.Credentials) { c.Basic = &auth.Basic{User: e2eUser, Password: "wrong-password"} },
		},
		{
			name:   "api key in header",
			scheme: apiKeyIn(a2a.APIKeySecuritySchemeLocationHeader, keyHeader),
			check:  func(r *http.Request) error { return equal(keyHeader, r.Header.Get(keyHeader), e2eAPIKey) },
			slots:  []string{slotHeader},
			spoil:  func(c *auth.Credentials) { c.APIKeys = map[string]string{"*": "wrong-key"} },
		},
		{
			name:   "api key in query",
			scheme: apiKeyIn(a2a.APIKeySecuritySchemeLocationQuery, keyQuery),
			check:  func(r *http.Request) error { return equal(keyQuery, r.URL.Query().Get(keyQuery), e2eAPIKey) },
			slots:  []string{slotQuery},
			spoil:  func(c *auth.Credentials) { c.APIKeys = map[string]string{"*": "wrong-key"} },
		},
		{
			name:   "api key in cookie",
			scheme: apiKeyIn(a2a.APIKeySecuritySchemeLocationCookie, keyCookie),
			check: func(r *http.Request) error {
				ck, err := r.Cookie(keyCookie)
				if err != nil {
					return err
				}
				return equal(keyCookie, ck.Value, e2eAPIKey)
			},
			slots: []string{slotCookie},
			spoil: func(c *auth.Credentials) { c.APIKeys = map[string]string{"*": "wrong-key"} },
		},
		{
			name: "oauth2 client credentials at the declared token URL",
			scheme: a2a.OAuth2SecurityScheme{Flows: a2a.ClientCredentialsOAuthFlow{
				TokenURL: o.TokenURL, Scopes: map[string]string{"a2a.invoke": "invoke skills"}}},
			scopes: []string{"a2a.invoke"},
			check:  accessToken,
			slots:  []string{slotAuthorization},
			spoil:  forgedToken,
			tokens: 1,
		},
		{
			name:        "openid connect discovery then client credentials",
			scheme:      a2a.OpenIDConnectSecurityScheme{OpenIDConnectURL: o.Issuer + "/.well-known/openid-configuration"},
			check:       accessToken,
			slots:       []string{slotAuthorization},
			spoil:       forgedToken,
			tokens:      1,
			discoveries: 1,
		},
		{
			name:   "mutual tls",
			scheme: a2a.MutualTLSSecurityScheme{},
			mtls:   true,
			check: func(r *http.Request) error {
				if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
					return errors.New("no verified client certificate")
				}
				return equal("client certificate CN", r.TLS.VerifiedChains[0][0].Subject.CommonName, e2eClientID)
			},
			slots: []string{slotCert},
			spoil: func(c *auth.Credentials) { c.TLS = &auth.TLS{RootCAs: roots, ClientCert: &rogue.Client} },
		},
	}
	bindings := []a2a.TransportProtocol{a2a.TransportProtocolJSONRPC, a2a.TransportProtocolHTTPJSON}
	for _, tc := range tests {
		for _, binding := range bindings {
			for _, spoiled := range []bool{false, true} {
				name := tc.name + "/" + string(binding)
				if spoiled {
					name += "/spoiled"
				}
				t.Run(name, func(t *testing.T) {
					rec := &recorder{check: tc.check}
					p := startPartner(t, partnerOpts{
						bindings:     []a2a.TransportProtocol{binding},
						schemes:      a2a.NamedSecuritySchemes{schemeName: tc.scheme},
						requirements: a2a.SecurityRequirementsOptions{{schemeName: tc.scopes}},
						enforce:      rec.enforce,
						serverTLS:    partnerTLS(pk, tc.mtls),
						rewriteFor:   echoCredentials,
					})
					// The card fetch is not under test; it needs the client
					// certificate only where every connection does.
					var identity *tls.Certificate
					if tc.mtls {
						identity = &pk.Client
					}
					creds := e2eCredentials(roots, pk)
					if spoiled {
						tc.spoil(&creds)
					}
					tokens, discoveries := o.Tokens(), o.Discoveries()
					a := discover(t, p, Config{Discovery: cardClient(pk.Pool, identity), Authorize: creds.Authorize})
					if got := a.Report().Auth; !slices.Equal(got.Schemes, []string{schemeName}) || got.Unsatisfiable != "" {
						t.Fatalf("auth plan %+v, want %s satisfied", got, schemeName)
					}

					out, err := a.Invoke(t.Context(), call(a, "echo", `{"message":"hi"}`))
					seen := rec.requests()
					if spoiled {
						if err == nil {
							t.Fatalf("send with a spoiled credential succeeded: %s", out)
						}
						if errors.Is(err, ErrDeniedLocally) {
							t.Fatalf("spoiled credential denied locally, want the partner to refuse: %v", err)
						}
						for _, c := range seen {
							if c.verdict == nil {
								t.Errorf("partner accepted a spoiled request: %v", c.slots)
							}
						}
						// mTLS is refused in the handshake, before any request.
						if len(seen) == 0 && !tc.mtls {
							t.Error("the spoiled request never reached the partner")
						}
						noE2ESecretIn(t, "error", err.Error())
						return
					}
					if err != nil {
						t.Fatalf("Invoke: %v", err)
					}
					var res struct{ Task *a2a.Task }
					if err := json.Unmarshal(out, &res); err != nil || res.Task == nil || res.Task.Status.State != a2a.TaskStateCompleted {
						t.Fatalf("send answered %s (%v), want a completed task", out, err)
					}
					// The partner echoed the request's credentials into its
					// answer: the result holds none of them.
					noE2ESecretIn(t, "the result", string(out))
					if len(tc.slots) > 0 && tc.slots[0] != slotCert && !strings.Contains(string(out), "[REDACTED]") {
						t.Errorf("the echoed credential is not marked redacted: %s", out)
					}
					if access := strings.TrimPrefix(seen[0].slots[slotAuthorization], "Bearer "); tc.tokens > 0 && strings.Contains(string(out), access) {
						t.Errorf("the result holds the access token: %s", out)
					}
					if calls := p.agent.calls(); len(calls) != 1 || calls[0].parts[0].Text() != "hi" {
						t.Fatalf("partner agent saw %+v, want one message \"hi\"", calls)
					}
					if len(seen) == 0 || int64(len(seen)) != p.requests.Load() {
						t.Fatalf("middleware recorded %d requests, partner served %d", len(seen), p.requests.Load())
					}
					for i, c := range seen {
						if c.verdict != nil {
							t.Errorf("request %d refused: %v", i, c.verdict)
						}
						for slot, v := range c.slots {
							if !slices.Contains(tc.slots, slot) {
								t.Errorf("request %d carries an unrequested %s: %q", i, slot, v)
							}
						}
						for _, slot := range tc.slots {
							if c.slots[slot] == "" {
								t.Errorf("request %d lacks its %s", i, slot)
							}
						}
						noE2ESecretIn(t, fmt.Sprintf("request %d's other headers, parameters and cookies", i), c.rest)
					}
					if got := o.Tokens() - tokens; got != tc.tokens {
						t.Errorf("token requests = %d, want %d", got, tc.tokens)
					}
					if got := o.Discoveries() - discoveries; got != tc.discoveries {
						t.Errorf("OpenID discoveries = %d, want %d", got, tc.discoveries)
					}
				})
			}
		}
	}
}

// TestRealAuthUnsatisfiable: a card whose every requirement the
// credentials cannot meet is discovered (the report says why) and every
// call is denied locally; the partner serves the card and no A2A request.
func TestRealAuthUnsatisfiable(t *testing.T) {
	pk := authtest.NewPKI(t, "chio test CA", e2eClientID)
	full := e2eCredentials(pk.Pool, pk)
	noKeys, noCert := full, full
	noKeys.APIKeys = nil
	noCert.TLS = &auth.TLS{RootCAs: pk.Pool}
	for _, tc := range []struct {
		name    string
		schemes a2a.NamedSecuritySchemes
		reqs    a2a.SecurityRequirementsOptions
		creds   auth.Credentials
		// failing are the schemes the error must name.
		failing []string
	}{
		{name: "http digest is not supported", creds: full,
			schemes: a2a.NamedSecuritySchemes{"digest": a2a.HTTPAuthSecurityScheme{Scheme: "Digest"}},
			reqs:    a2a.SecurityRequirementsOptions{{"digest": {}}}, failing: []string{"digest"}},
		{name: "no api key configured", creds: noKeys,
			schemes: a2a.NamedSecuritySchemes{"key": a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationHeader, Name: keyHeader}},
			reqs:    a2a.SecurityRequirementsOptions{{"key": {}}}, failing: []string{"key"}},
		{name: "no client certificate for mtls", creds: noCert,
			schemes: a2a.NamedSecuritySchemes{"mtls": a2a.MutualTLSSecurityScheme{}},
			reqs:    a2a.SecurityRequirementsOptions{{"mtls": {}}}, failing: []string{"mtls"}},
		{name: "no alternative set satisfiable", creds: noKeys,
			schemes: a2a.NamedSecuritySchemes{
				"digest": a2a.HTTPAuthSecurityScheme{Scheme: "Digest"},
				"key":    a2a.APIKeySecurityScheme{Location: a2a.APIKeySecuritySchemeLocationCookie, Name: keyCookie},
				"bearer": a2a.HTTPAuthSecurityScheme{Scheme: "Bearer"},
			},
			// bearer alone would do, but it is required together with key.
			reqs:    a2a.SecurityRequirementsOptions{{"digest": {}}, {"bearer": {}, "key": {}}},
			failing: []string{"digest", "key"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The partner accepts anything: only the adapter stands in the way.
			p := startPartner(t, partnerOpts{schemes: tc.schemes, requirements: tc.reqs, serverTLS: partnerTLS(pk, false),
				enforce: func(*http.Request) error { return nil }})
			a := discover(t, p, Config{Discovery: cardClient(pk.Pool, nil), Authorize: tc.creds.Authorize})
			r := a.Report()
			if r.Auth.Unsatisfiable == "" || len(r.Auth.Schemes) != 0 {
				t.Fatalf("auth plan %+v, want unsatisfiable", r.Auth)
			}
			_, err := a.Invoke(t.Context(), call(a, "echo", `{"message":"hi"}`))
			if !errors.Is(err, ErrDeniedLocally) || !errors.Is(err, auth.ErrUnsatisfiable) {
				t.Fatalf("Invoke: err = %v, want ErrDeniedLocally wrapping auth.ErrUnsatisfiable", err)
			}
			for _, name := range tc.failing {
				if !strings.Contains(err.Error(), fmt.Sprintf("scheme %q", name)) {
					t.Errorf("error does not name scheme %q: %v", name, err)
				}
			}
			noE2ESecretIn(t, "error", err.Error())
			noE2ESecretIn(t, "report", r.Auth.Unsatisfiable)
			if n := p.requests.Load(); n != 0 {
				t.Errorf("partner served %d A2A requests, want 0", n)
			}
			if n := p.cardHits.Load(); n != 1 {
				t.Errorf("card fetched %d times, want 1", n)
			}
		})
	}
}

// cardClient fetches cards trusting roots, presenting identity if any.
func cardClient(roots *x509.CertPool, identity *tls.Certificate) *http.Client {
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if identity != nil {
		cfg.Certificates = []tls.Certificate{*identity}
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}}
}

func noE2ESecretIn(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range e2eSecrets() {
		if strings.Contains(s, secret) {
			t.Errorf("%s leaks a secret: %s", what, s)
		}
	}
}

// echoCredentials is a partner that quotes every credential a request
// carried in its answer's text, as an error page quoting headers would.
func echoCredentials(r *http.Request, body []byte) []byte {
	var carried []string
	for _, name := range []string{"Authorization", keyHeader} {
		if v := r.Header.Get(name); v != "" {
			carried = append(carried, name+": "+v)
		}
	}
	if v := r.URL.Query().Get(keyQuery); v != "" {
		carried = append(carried, keyQuery+"="+v)
	}
	if ck, err := r.Cookie(keyCookie); err == nil {
		carried = append(carried, keyCookie+"="+ck.Value)
	}
	echo, _ := json.Marshal("hi, you sent " + strings.Join(carried, "; "))
	return bytes.ReplaceAll(body, []byte(`"hi"`), echo)
}
