package tlsreload_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/internal/tlsreload"
)

// pki writes a CA and a certificate for 127.0.0.1 into a new directory.
func pki(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := natsauth.WriteServerTLS(dir, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// served is the serial number of the certificate a handshake with ln gets.
func served(t *testing.T, addr string, roots *x509.CertPool, client *tls.Certificate) (string, error) {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
	if client != nil {
		cfg.Certificates = []tls.Certificate{*client}
	}
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer c.Close()
	// TLS 1.3 reports a refused client certificate on the first read.
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); err != nil {
		if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
			return "", err
		}
	}
	return c.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

func pool(t *testing.T, dirs ...string) *x509.CertPool {
	p := x509.NewCertPool()
	for _, d := range dirs {
		raw, err := os.ReadFile(filepath.Join(d, natsauth.CAFile))
		if err != nil {
			t.Fatal(err)
		}
		p.AppendCertsFromPEM(raw)
	}
	return p
}

// listen serves TLS handshakes with cfg until the test ends.
func listen(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _ = c.(*tls.Conn).Handshake(); time.Sleep(300 * time.Millisecond); c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func copyFile(t *testing.T, from, to string) {
	raw, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, raw, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestReload: a certificate changed on disk is served from the next
// handshake a second later; one that does not load leaves the previous
// one served.
func TestReload(t *testing.T) {
	a, b := pki(t), pki(t)
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	copyFile(t, filepath.Join(a, natsauth.ServerCertFile), cert)
	copyFile(t, filepath.Join(a, natsauth.ServerKeyFile), key)
	cfg, err := tlsreload.Config(tlsreload.Files{Cert: cert, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, cfg)
	roots := pool(t, a, b)
	first, err := served(t, addr, roots, nil)
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(b, natsauth.ServerCertFile), cert)
	copyFile(t, filepath.Join(b, natsauth.ServerKeyFile), key)
	time.Sleep(1100 * time.Millisecond)
	second, err := served(t, addr, roots, nil)
	if err != nil || second == first {
		t.Fatalf("after the change: serial %s (%v), before %s: want the new certificate", second, err, first)
	}
	if err := os.WriteFile(cert, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond)
	if third, err := served(t, addr, roots, nil); err != nil || third != second {
		t.Fatalf("after a broken change: serial %s (%v), want %s still", third, err, second)
	}
}

// TestClientCA: with a client CA, a client without a certificate, or with
// one another CA signed, is refused.
func TestClientCA(t *testing.T) {
	a, stranger := pki(t), pki(t)
	cfg, err := tlsreload.Config(tlsreload.Files{Cert: filepath.Join(a, natsauth.ServerCertFile), Key: filepath.Join(a, natsauth.ServerKeyFile),
		ClientCA: filepath.Join(a, natsauth.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	addr := listen(t, cfg)
	load := func(dir string) *tls.Certificate {
		c, err := tls.LoadX509KeyPair(filepath.Join(dir, natsauth.ServerCertFile), filepath.Join(dir, natsauth.ServerKeyFile))
		if err != nil {
			t.Fatal(err)
		}
		return &c
	}
	roots := pool(t, a)
	if _, err := served(t, addr, roots, load(a)); err != nil {
		t.Fatalf("a client the CA signed: %v", err)
	}
	if _, err := served(t, addr, roots, nil); err == nil {
		t.Fatal("a client without a certificate was served")
	}
	if _, err := served(t, addr, roots, load(stranger)); err == nil {
		t.Fatal("a client another CA signed was served")
	}
}

func TestConfigErrors(t *testing.T) {
	a := pki(t)
	for _, f := range []tlsreload.Files{
		{Cert: filepath.Join(a, natsauth.ServerCertFile)},
		{Cert: filepath.Join(a, "missing.pem"), Key: filepath.Join(a, natsauth.ServerKeyFile)},
		{Cert: filepath.Join(a, natsauth.ServerCertFile), Key: filepath.Join(a, natsauth.ServerKeyFile), ClientCA: filepath.Join(a, natsauth.ServerKeyFile)},
	} {
		if _, err := tlsreload.Config(f); err == nil {
			t.Errorf("%+v: no error", f)
		}
	}
}
