package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
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
	resp, err := fetchClient.Get(src)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d", src, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxFetch+1))
	if err == nil && len(b) > maxFetch {
		err = fmt.Errorf("GET %s: larger than %d bytes", src, maxFetch)
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

// verifyAgentCard is `chio verify --agent-card`: it checks the card's
// signatures against the keys of jwks (a file or URL), or, without one,
// against the keys at each signature's jku. Exit status 1 means no
// signature verifies, 2 that the inputs could not be read.
func verifyAgentCard(cmd *cobra.Command, cardSrc, jwksSrc string) error {
	card, err := readSource(cardURL(cardSrc))
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
		// No pinned keys: fetch each signature's jku. That proves the card
		// matches the key its publisher serves, no more.
		seen := map[string]bool{}
		var fetched []string
		for _, h := range hdrs {
			if h.JKU == "" || seen[h.JKU] {
				continue
			}
			seen[h.JKU] = true
			if !strings.HasPrefix(h.JKU, "https://") && !strings.HasPrefix(h.JKU, "http://") {
				continue
			}
			raw, err := readSource(h.JKU)
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
			return usageError(errors.New("the card's signatures name no http(s) jku: pass --jwks FILE|URL"))
		}
		from = strings.Join(fetched, ", ") + " (the card's jku; pin the key with --jwks for an offline check)"
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
