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
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(), Subject: pkix.Name{CommonName: "chio nats"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(certLifetime),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("nats tls: server certificate: %w", err)
	}
	caKeyDER, err := x509.MarshalPKCS8PrivateKey(caKey)
	if err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("nats tls: %w", err)
	}
	for _, f := range []struct {
		name string
		pem  *pem.Block
		mode fs.FileMode
	}{
		{caKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: caKeyDER}, 0o600},
		{CAFile, &pem.Block{Type: "CERTIFICATE", Bytes: caDER}, 0o644},
		{ServerKeyFile, &pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}, 0o600},
		// Written last: its presence is what says the set is complete.
		{ServerCertFile, &pem.Block{Type: "CERTIFICATE", Bytes: der}, 0o644},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), pem.EncodeToMemory(f.pem), f.mode); err != nil {
			return fmt.Errorf("nats tls: %w", err)
		}
	}
	return nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}
