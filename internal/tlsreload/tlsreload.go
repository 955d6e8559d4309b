// Package tlsreload is the TLS configuration of chio's HTTP and gRPC
// listeners: a certificate and key, and optionally the CA of client
// certificates (mutual TLS), read from files and read again when they
// change on disk, so a renewed certificate is served without a restart.
package tlsreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Files names the PEM files of a listener's TLS.
type Files struct {
	Cert, Key string
	// ClientCA, when set, requires every client to present a certificate
	// that this CA signed.
	ClientCA string
}

// checkEvery bounds how often a handshake looks at the files again.
const checkEvery = time.Second

// Config returns a server configuration serving f, read now (an error if
// the files do not load) and again whenever a file's size or time
// changes. A file that changed but does not load is logged and the
// previous certificate kept.
func Config(f Files) (*tls.Config, error) {
	if f.Cert == "" || f.Key == "" {
		return nil, errors.New("a TLS certificate and its key are both needed")
	}
	r := &reloader{files: f}
	if err := r.load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.current(), nil
		},
	}, nil
}

type reloader struct {
	files Files

	mu      sync.Mutex
	cfg     *tls.Config
	stamp   string
	checked time.Time
}

// stamp is what says a file changed: its size and modification time.
func (r *reloader) stampNow() string {
	s := ""
	for _, p := range []string{r.files.Cert, r.files.Key, r.files.ClientCA} {
		if p == "" {
			continue
		}
		if fi, err := os.Stat(p); err == nil {
			s += fmt.Sprintf("%d/%d;", fi.Size(), fi.ModTime().UnixNano())
		}
	}
	return s
}

func (r *reloader) load() error {
	stamp := r.stampNow()
	cert, err := tls.LoadX509KeyPair(r.files.Cert, r.files.Key)
	if err != nil {
		return fmt.Errorf("TLS certificate %s and key %s: %w", r.files.Cert, r.files.Key, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2", "http/1.1"}}
	if r.files.ClientCA != "" {
		raw, err := os.ReadFile(r.files.ClientCA)
		if err != nil {
			return fmt.Errorf("TLS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(raw) {
			return fmt.Errorf("TLS client CA %s: no PEM certificate", r.files.ClientCA)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	r.mu.Lock()
	r.cfg, r.stamp, r.checked = cfg, stamp, time.Now()
	r.mu.Unlock()
	return nil
}

// current is the configuration to serve, read again first if a file
// changed since the last look (at most once a second).
func (r *reloader) current() *tls.Config {
	r.mu.Lock()
	due := time.Since(r.checked) >= checkEvery
	if due {
		r.checked = time.Now()
	}
	cfg, stamp := r.cfg, r.stamp
	r.mu.Unlock()
	if due && r.stampNow() != stamp {
		if err := r.load(); err != nil {
			slog.Error("TLS: a changed certificate does not load; serving the previous one", "err", err)
		} else {
			slog.Info("TLS: serving the certificate changed on disk", "cert", r.files.Cert)
			r.mu.Lock()
			cfg = r.cfg
			r.mu.Unlock()
		}
	}
	return cfg
}
