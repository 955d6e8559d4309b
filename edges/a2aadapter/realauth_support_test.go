package a2aadapter

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The end-to-end auth tests run the real auth.Credentials.Authorize against
// partners that enforce each scheme. These are their components: a test CA
// with server and client certificates, and zitadel's example OpenID
// provider with one client-credentials client.

// testPKI is a CA with a partner certificate and a client certificate it
// issued.
type testPKI struct {
	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

func newTestPKI(t *testing.T, caName string) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("generate CA key: %v", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: caName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("create CA certificate: %v", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("parse CA certificate: %v", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) tls.Certificate {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatalf("generate %s key: %v", cn, err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatalf("create %s certificate: %v", cn, err)
		}
		return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	}
	return testPKI{
		pool:   pool,
		server: leaf(2, "partner", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}),
		client: leaf(3, e2eClientID, x509.ExtKeyUsageClientAuth, nil),
	}
}

// partnerTLS serves the CA's partner certificate and checks client
// certificates against the CA: always (mtls) or when one is given, so that
// a certificate sent when the card does not ask for one is seen.
func (pk testPKI) partnerTLS(mtls bool) *tls.Config {
	mode := tls.VerifyClientCertIfGiven
	if mtls {
		mode = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{Certificates: []tls.Certificate{pk.server}, ClientAuth: mode, ClientCAs: pk.pool}
}

// testOP is zitadel's example OpenID provider over TLS (httptest's
// certificate), with one client-credentials client issuing JWT access
// tokens a partner can verify.
type testOP struct {
	srv         *httptest.Server
	issuer      string
	tokenURL    string
	discoveries atomic.Int32
	tokens      atomic.Int32
}

// ccStorage registers the client-credentials client on the example storage.
type ccStorage struct {
	*storage.Storage
	client op.Client
}

func (s *ccStorage) ClientCredentials(_ context.Context, id, secret string) (op.Client, error) {
	if id != e2eClientID || secret != e2eClientSecret {
		return nil, errors.New("wrong client id or secret")
	}
	return s.client, nil
}

func (s *ccStorage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	return &zoidc.JWTTokenRequest{Subject: id, Audience: []string{id}, Scopes: scopes}, nil
}

// ccClient is the example web client switched to the client-credentials
// grant and JWT access tokens.
type ccClient struct{ *storage.Client }

func (ccClient) GrantTypes() []zoidc.GrantType {
	return []zoidc.GrantType{zoidc.GrantTypeClientCredentials}
}

func (ccClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func startTestOP(t *testing.T) *testOP {
	t.Helper()
	o := &testOP{}
	// The issuer is the server's URL, known once it listens; the provider
	// is installed before any request can arrive.
	var handler atomic.Pointer[http.Handler]
	o.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/openid-configuration":
			o.discoveries.Add(1)
		case "/oauth/token":
			o.tokens.Add(1)
		}
		(*handler.Load()).ServeHTTP(w, r)
	}))
	o.srv.StartTLS()
	t.Cleanup(o.srv.Close)
	o.issuer = o.srv.URL
	o.tokenURL = o.issuer + "/oauth/token"
	store := &ccStorage{
		Storage: storage.NewStorageWithClients(storage.NewUserStore(o.issuer), map[string]*storage.Client{}),
		client:  ccClient{storage.WebClient(e2eClientID, e2eClientSecret)},
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey:      sha256.Sum256([]byte("chio a2a adapter test")),
		AuthMethodPost: true,
	}, store, op.StaticIssuer(o.issuer))
	if err != nil {
		t.Fatalf("start OpenID provider: %v", err)
	}
	var h http.Handler = provider
	handler.Store(&h)
	return o
}

// verifier is how a partner checks the access tokens it receives: the
// provider's signature, issuer, expiry and audience (the client).
func (o *testOP) verifier(t *testing.T) *oidc.IDTokenVerifier {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(o.srv.Certificate())
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	provider, err := oidc.NewProvider(oidc.ClientContext(context.Background(), hc), o.issuer)
	if err != nil {
		t.Fatalf("partner: discover the OpenID provider: %v", err)
	}
	return provider.Verifier(&oidc.Config{ClientID: e2eClientID})
}
