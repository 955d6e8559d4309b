package main

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/natsauth"
)

// TestUpServesTLS: with --tls-cert, --tls-key and --tls-client-ca, chio
// up serves HTTPS and gRPC over TLS to clients whose certificate the CA
// signed, and refuses plain HTTP and clients without a certificate.
func TestUpServesTLS(t *testing.T) {
	pki := t.TempDir()
	if err := natsauth.WriteServerTLS(pki, []string{"127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	cert, key, ca := filepath.Join(pki, natsauth.ServerCertFile), filepath.Join(pki, natsauth.ServerKeyFile), filepath.Join(pki, natsauth.CAFile)
	re := regexp.MustCompile(`chio up: gRPC +([0-9.:]+) `)
	out, _ := startCommand(t, re, "up", "--data-dir", t.TempDir(), "--listen", "127.0.0.1:0", "--nats-listen", "none",
		"--grpc-listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", ca)
	m := regexp.MustCompile(`log API on (https://[0-9.:]+)`).FindStringSubmatch(out)
	if m == nil || !strings.Contains(out, "chio up: agent card   https://") {
		t.Fatalf("chio up does not announce https:\n%s", out)
	}
	base, grpcAddr := m[1], re.FindStringSubmatch(out)[1]
	roots := x509.NewCertPool()
	raw, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots.AppendCertsFromPEM(raw)
	mine, err := tls.LoadX509KeyPair(cert, key) // the CA signed it for client use too
	if err != nil {
		t.Fatal(err)
	}
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}}}
	}
	resp, err := client(mine).Get(base + "/healthz")
	if err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TLS == nil {
		t.Fatalf("HTTPS /healthz: %d", resp.StatusCode)
	}
	if resp, err := client().Get(base + "/log/checkpoint"); err == nil {
		resp.Body.Close()
		t.Fatalf("a client without a certificate was answered %d", resp.StatusCode)
	}
	plain := strings.Replace(base, "https://", "http://", 1)
	if resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(plain + "/log/checkpoint"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP was served")
		}
	}
	// gRPC: a TLS handshake offering h2, with the client certificate.
	c, err := tls.Dial("tcp", grpcAddr, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{mine}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	defer c.Close()
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("gRPC over TLS negotiated %q, want h2", p)
	}
}
