package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chio-ledger/chio/edges/a2a"
	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/schemas"
)

// cardKeyFile is the agent card signing key in chio up's keys directory
// (hex Ed25519 seed, like the others).
const cardKeyFile = "card.key"

// cardConfig applies --card-key and --card-version to cfg. The card's
// Last-Modified is this replica's start: every restart (the only way its
// card changes) moves it forward, so a client's If-Modified-Since never
// gets a 304 for a card it has not seen.
func (f *edgeFlags) cardConfig(cfg *a2a.Config) error {
	switch f.cardVersion {
	case "", string(wire.V10):
		cfg.CardDialect = wire.V10
	case string(wire.V03):
		cfg.CardDialect = wire.V03
	default:
		return usageError(fmt.Errorf("--card-version %q: want 1.0 or 0.3", f.cardVersion))
	}
	if f.cardKey != "" {
		key, err := loadCardKey(f.cardKey)
		if err != nil {
			return fmt.Errorf("--card-key: %w", err)
		}
		cfg.CardKey = key
	}
	cfg.CardModified = time.Now()
	return nil
}

// listenOrigin is "http://" + addr, the edge's own origin when it listens
// on addr, if addr names a concrete host and port: not an empty host,
// 0.0.0.0 or :: (a client reaches those under some other name, which the
// edge does not know) and not port 0 (the port is known once bound).
// Otherwise it is "": without --public-url the edge then has no own origin
// and serves its card unsigned.
func listenOrigin(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || port == "0" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return "http://" + net.JoinHostPort(host, port)
}

// loadCardKey reads the card key at path, creating it when it is missing.
// Replicas starting together on a shared volume may race to create it: the
// key is written to a temporary file and linked into place, which fails
// when the file exists, so a replica only ever reads a whole key and the
// losers read the winner's: all of them sign with one key.
func loadCardKey(path string) (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		return schemas.ParsePrivateKey(strings.TrimSpace(string(b)))
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".card-key-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, werr := fmt.Fprintln(tmp, schemas.EncodePrivateKey(priv))
	if err := tmp.Close(); werr == nil {
		werr = err
	}
	if werr != nil {
		return nil, werr
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return loadCardKey(path) // another replica created it: read theirs
		}
		return nil, err
	}
	return priv, nil
}

// maxFetch bounds what verify reads from a URL.
const maxFetch = 1 << 20

var fetchClient = &http.Client{Timeout: 30 * time.Second}

// readSource reads a file, or GETs an http(s) URL (status 200 required).
func readSource(src string) ([]byte, error) {
	if !strings.HasPrefix(src, "http://") && !strings.HasPrefix(src, "https://") {
		return os.ReadFile(src)
	}
	return fetch(fetchClient, src)
}

// fetch GETs u with c: status 200, at most maxFetch bytes.
func fetch(c *http.Client, u string) ([]byte, error) {
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFetch+1))
	if err == nil && len(b) > maxFetch {
		err = fmt.Errorf("GET %s: larger than %d bytes", u, maxFetch)
	}
	return b, err
}

// cardURL is src with the well-known card path added when src is a bare
// origin.
func cardURL(src string) string {
	u, err := url.Parse(src)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
		return src
	}
	u.Path = "/.well-known/agent-card.json"
	return u.String()
}

// httpOriginOf is u's origin, scheme://host:port with the scheme's default
// port made explicit and the host lowercased, for comparing two URLs' origins.
func httpOriginOf(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// loopbackHost is a host name that can only mean this machine.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// trustedJKU checks a jku before verify fetches it, when no key is pinned:
// https, or http to a loopback host only (a plain-http JWKS from the network
// can be swapped in transit), and on the origin the card was fetched from
// (cardOrigin): the card names its own jku, so a jku elsewhere would let
// whoever wrote the card (or served it in place of the real one) vouch for
// it with a key they host.
func trustedJKU(jku, cardOrigin string) error {
	u, err := url.Parse(jku)
	switch {
	case err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https"):
		return fmt.Errorf("jku %q is not an http(s) URL", jku)
	case u.Scheme == "http" && !loopbackHost(u.Hostname()):
		return fmt.Errorf("jku %s is plain http on a host that is not loopback (https is required)", jku)
	case httpOriginOf(u) != cardOrigin:
		return fmt.Errorf("jku %s is not on the origin the card came from (%s)", jku, cardOrigin)
	}
	return nil
}

// jkuClient fetches a JWKS from a jku: like fetchClient, but it follows no
// redirect to another origin, so the key comes from the origin checked.
var jkuClient = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if httpOriginOf(req.URL) != httpOriginOf(via[0].URL) {
		return fmt.Errorf("redirected to another origin (%s)", httpOriginOf(req.URL))
	}
	return nil
}}

// verifyAgentCard is `chio verify --agent-card`: it checks the card's
// signatures against the keys of jwks (a file or URL), or, without one,
// against the keys at each signature's jku, which must be on the origin
// the card was fetched from (trustedJKU). Exit status 1 means no
// signature verifies, 2 that the inputs could not be read (or that a card
// read from a file came without --jwks).
func verifyAgentCard(cmd *cobra.Command, cardSrc, jwksSrc string) error {
	src := cardURL(cardSrc)
	var cardOrigin string // the origin the card was fetched from; "" for a file
	if strings.HasPrefix(src, "http://") || strings.HasPrefix(src, "https://") {
		u, err := url.Parse(src)
		if err != nil || u.Host == "" {
			return usageError(fmt.Errorf("--agent-card %q: not a URL", cardSrc))
		}
		cardOrigin = httpOriginOf(u)
	} else if jwksSrc == "" {
		// Refused rather than verified against the card's own jku: a file
		// has no origin to hold the jku to, so anyone can write a card
		// naming a key they host and have it "verify". An OK that proves
		// nothing is worse than asking for the key.
		return usageError(fmt.Errorf("--agent-card %s is a file: pass --jwks FILE|URL to pin the key that must have signed it (or give the card's URL, whose origin its jku must share)", cardSrc))
	}
	card, err := readSource(src)
	if err != nil {
		return usageError(fmt.Errorf("--agent-card: %w", err))
	}
	_, hdrs, err := cardsig.Signatures(card)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("verify: FAILED agent card: %v", strings.TrimPrefix(err.Error(), "cardsig: "))}
	}
	var keys []cardsig.Key
	from := jwksSrc
	if jwksSrc != "" {
		raw, err := readSource(jwksSrc)
		if err != nil {
			return usageError(fmt.Errorf("--jwks: %w", err))
		}
		if keys, err = cardsig.ParseJWKS(raw); err != nil {
			return usageError(fmt.Errorf("--jwks: %w", err))
		}
	} else {
		// No pinned keys: fetch each signature's jku, if it is on the
		// card's origin. That proves the card matches the key that origin
		// serves, no more.
		seen := map[string]bool{}
		var fetched, refused []string
		for _, h := range hdrs {
			if h.JKU == "" || seen[h.JKU] {
				continue
			}
			seen[h.JKU] = true
			if err := trustedJKU(h.JKU, cardOrigin); err != nil {
				refused = append(refused, err.Error())
				continue
			}
			raw, err := fetch(jkuClient, h.JKU)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("verify: FAILED agent card: jku: %v", err)}
			}
			ks, err := cardsig.ParseJWKS(raw)
			if err != nil {
				return &exitError{code: 1, err: fmt.Errorf("verify: FAILED agent card: jku %s: %v", h.JKU, err)}
			}
			keys = append(keys, ks...)
			fetched = append(fetched, h.JKU)
		}
		if len(fetched) == 0 {
			if len(refused) > 0 {
				return &exitError{code: 1, err: fmt.Errorf("verify: FAILED agent card: no jku to trust: %s; pass --jwks FILE|URL to pin the key", strings.Join(refused, "; "))}
			}
			return usageError(errors.New("the card's signatures name no jku: pass --jwks FILE|URL"))
		}
		from = strings.Join(fetched, ", ") + " (the card's jku, on its origin; pin the key with --jwks for an offline check)"
	}
	v, err := cardsig.Verify(card, keys)
	if err != nil {
		return &exitError{code: 1, err: fmt.Errorf("verify: FAILED agent card: %v", strings.TrimPrefix(err.Error(), "cardsig: "))}
	}
	var named struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(card, &named)
	fmt.Fprintf(cmd.OutOrStdout(), "verify: OK agent card %q signature %d verified by key %s (%s) from %s\n",
		named.Name, v.Index, v.Header.KID, v.Header.Alg, from)
	return nil
}
