package natsauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The files of a deployment's internal CA and its NATS servers'
// certificate, in a credentials directory.
const (
	CAFile         = "ca.pem"
	caKeyFile      = "ca-key.pem"
	ServerCertFile = "server.pem"
	ServerKeyFile  = "server-key.pem"
)

// certLifetime is how long the generated certificates are valid.
const certLifetime = 5 * 365 * 24 * time.Hour

// WriteServerTLS makes an internal CA and one server certificate for the
// given host names and IP addresses (usable for clients and for the
// routes between servers, which present it both ways), unless the
// directory already holds them. Keys are written mode 0600.
func WriteServerTLS(dir string, hosts []string) error {
	if _, err := os.Stat(filepath.Join(dir, ServerCertFile)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("nats tls: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "Chio internal CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("nats tls: CA: %w", err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	der, keyDER, err := issueLeaf(ca, caKey, "chio nats", hosts, x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return fmt.Errorf("nats tls: server certificate: %w", err)
	}
	caKeyDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	if err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	return writePEMs(dir, []pemFile{
		{caKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: caKeyDER}, 0o600},
		{CAFile, &pem.Block{Type: "CERTIFICATE", Bytes: caDER}, 0o644},
		{ServerKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}, 0o600},
		// Written last: its presence is what says the set is complete.
		{ServerCertFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}, 0o644},
	})
}

// The files of an HTTPS server certificate issued by the internal CA
// (WriteHTTPSCert), e.g. the compose proxy's.
const (
	HTTPSCertFile = "https.pem"
	HTTPSKeyFile  = "https-key.pem"
)

// WriteHTTPSCert issues, with the internal CA that WriteServerTLS made in
// caDir, a server certificate for the given host names and IP addresses
// into dir (HTTPSCertFile, HTTPSKeyFile), unless dir already holds one.
// Clients trust it through caDir's CAFile. The key is written mode 0600,
// the certificate 0644.
func WriteHTTPSCert(caDir, dir string, hosts []string) error {
	if _, err := os.Stat(filepath.Join(dir, HTTPSCertFile)); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("https certificate: %w", err)
	}
	ca, caKey, err := readCA(caDir)
	if err != nil {
		return fmt.Errorf("https certificate: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("https certificate: %w", err)
	}
	der, keyDER, err := issueLeaf(ca, caKey, "chio https", hosts, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return fmt.Errorf("https certificate: %w", err)
	}
	return writePEMs(dir, []pemFile{
		{HTTPSKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}, 0o600},
		{HTTPSCertFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}, 0o644},
	})
}

// readCA reads the internal CA's certificate and key from dir.
func readCA(dir string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CAFile))
	if err != nil {
		return nil, nil, fmt.Errorf("internal CA: %w", err)
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, caKeyFile))
	if err != nil {
		return nil, nil, fmt.Errorf("internal CA: %w", err)
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("internal CA in %s: not PEM", dir)
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("internal CA: %w", err)
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("internal CA key: %w", err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, nil, fmt.Errorf("internal CA key in %s: not ECDSA", dir)
	}
	return ca, key, nil
}

// issueLeaf makes a P-256 key and a certificate for hosts signed by the CA.
func issueLeaf(ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, hosts []string, usage ...x509.ExtKeyUsage) (der, keyDER []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: cn},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if der, err = x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey); err != nil {
		return nil, nil, err
	}
	if keyDER, err = x509.MarshalPKCS8PrivateKey(key); err != nil {
		return nil, nil, err
	}
	return der, keyDER, nil
}

type pemFile struct {
	name string
	pem  *pem.Block
	mode fs.FileMode
}

func writePEMs(dir string, files []pemFile) error {
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.name), pem.EncodeToMemory(f.pem), f.mode); err != nil {
			return fmt.Errorf("tls: %w", err)
		}
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
