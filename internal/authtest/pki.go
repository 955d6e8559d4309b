package authtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"
)

// PKI is a test CA with a server and a client certificate it issued, all
// valid from an hour ago to an hour from now.
type PKI struct {
	// Pool holds the CA certificate alone: trust it to accept the server
	// certificate, or require client certificates issued by it.
	Pool *x509.CertPool
	// Server is a certificate for the loopback addresses (127.0.0.1 and
	// ::1) with common name "partner".
	Server tls.Certificate
	// Client is a client certificate with the common name given to NewPKI.
	Client tls.Certificate
}

// NewPKI makes a CA named caName and has it issue the server certificate
// and a client certificate for clientCN. Two PKIs never trust each other's
// certificates, even with the same names.
func NewPKI(t testing.TB, caName, clientCN string) *PKI {
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
	return &PKI{
		Pool:   pool,
		Server: leaf(2, "partner", x509.ExtKeyUsageServerAuth, []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}),
		Client: leaf(3, clientCN, x509.ExtKeyUsageClientAuth, nil),
	}
}

// ServerTLS is a server configuration that presents the server certificate
// and checks client certificates against the CA as mode says.
func (p *PKI) ServerTLS(mode tls.ClientAuthType) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{p.Server}, ClientAuth: mode, ClientCAs: p.Pool}
}
