package a2a

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
)

// Agent card paths.
const (
	cardPath       = "/.well-known/agent-card.json"
	legacyCardPath = "/.well-known/agent.json"
)

// cardVary names the request headers the served card depends on: the
// origin (its URLs) and A2A-Version (its dialect).
const cardVary = "Host, X-Forwarded-Host, X-Forwarded-Proto, A2A-Version"

// maxCachedCards bounds the card cache: without a configured public URL
// the origin comes from the request's Host, which a client chooses.
const maxCachedCards = 64

// cardCache holds the served card bytes (signed, when the edge has a card
// key) per origin and dialect: the card of an edge never changes once it is
// built, and signing is the only work worth skipping.
type cardCache struct {
	once     sync.Once
	signer   *cardsig.Signer
	initErr  error
	modified time.Time

	mu      sync.Mutex
	entries map[cardCacheKey]cardEntry
}

type cardCacheKey struct {
	origin  string
	dialect wire.Version
}

type cardEntry struct {
	body []byte
	etag string
}

func (e *Edge) cardInit() {
	e.cards.once.Do(func() {
		if e.cfg.CardKey != nil {
			e.cards.signer, e.cards.initErr = cardsig.NewSigner(e.cfg.CardKey)
		}
		m := e.cfg.CardModified
		if m.IsZero() {
			m = time.Now()
		}
		e.cards.modified = m.UTC().Truncate(time.Second)
	})
}

// CardJSON is the card served to origin in dialect v (wire.V10 or
// wire.V03), signed when the edge has a CardKey: the bytes and their ETag.
func (e *Edge) CardJSON(origin string, v wire.Version) ([]byte, string, error) {
	en, err := e.cardEntry(strings.TrimRight(origin, "/"), v)
	return en.body, en.etag, err
}

func (e *Edge) cardEntry(origin string, v wire.Version) (cardEntry, error) {
	e.cardInit()
	if e.cards.initErr != nil {
		return cardEntry{}, e.cards.initErr
	}
	k := cardCacheKey{origin, v}
	e.cards.mu.Lock()
	en, ok := e.cards.entries[k]
	e.cards.mu.Unlock()
	if ok {
		return en, nil
	}
	body, err := wire.EncodeAgentCardFor(e.Card(origin), v)
	if err != nil {
		return cardEntry{}, err
	}
	if e.cards.signer != nil {
		if body, err = e.cards.signer.Sign(body, origin+cardsig.JWKSPath); err != nil {
			return cardEntry{}, err
		}
	}
	sum := sha256.Sum256(body)
	en = cardEntry{body: body, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	e.cards.mu.Lock()
	if e.cards.entries == nil || len(e.cards.entries) >= maxCachedCards {
		e.cards.entries = make(map[cardCacheKey]cardEntry)
	}
	e.cards.entries[k] = en
	e.cards.mu.Unlock()
	return en, nil
}

// cardDialect is the card a request gets. An explicit A2A-Version (the
// header, else the query parameter) decides: "1.0", or "0.3" (and 0.3.x)
// for the 0.3-compatible card. Without one (or with a version this edge
// does not serve) the path does: /.well-known/agent-card.json gives def,
// the 1.0 card unless configured otherwise, since 1.0 clients (the a2a-go
// v2 resolver, the 1.0 conformance kit) fetch it without the header;
// /.well-known/agent.json, the pre-1.0 path, and the 0.3 REST GET /v1/card
// give the 0.3-compatible card.
func cardDialect(r *http.Request, def wire.Version) wire.Version {
	v := strings.TrimSpace(r.Header.Get(wire.HeaderVersion))
	if v == "" {
		v = strings.TrimSpace(r.URL.Query().Get(wire.HeaderVersion))
	}
	switch {
	case v == string(wire.V10):
		return wire.V10
	case v == string(wire.V03) || strings.HasPrefix(v, string(wire.V03)+"."):
		return wire.V03
	}
	if r.URL.Path == cardPath {
		if def == wire.V03 {
			return wire.V03
		}
		return wire.V10
	}
	return wire.V03
}

// etagMatches applies If-None-Match (weak comparison, RFC 9110 §13.1.2).
func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// notModified applies the card's validators: If-None-Match when present
// (it takes precedence, RFC 9110 §13.2.2), else If-Modified-Since.
func notModified(r *http.Request, etag string, modified time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		return etagMatches(inm, etag)
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" {
		if t, err := http.ParseTime(ims); err == nil {
			return !modified.After(t)
		}
	}
	return false
}

// serveJWKS serves the card key's public half; 404 without a card key.
func (e *Edge) serveJWKS(c echo.Context) error {
	e.cardInit()
	if e.cards.signer == nil {
		return c.JSON(http.StatusNotFound, map[string]string{"error": "this edge does not sign its agent card", "code": "no_card_key"})
	}
	c.Response().Header().Set("Cache-Control", "public, max-age=300")
	return c.Blob(http.StatusOK, "application/jwk-set+json", e.cards.signer.JWKS())
}

// extendedCard answers GetExtendedAgentCard (0.3: agent/getAuthenticatedExtendedCard,
// GET /v1/card): the card as its caller sees it, listing only the skills its
// capability may invoke, where the public card lists every exposed one. It
// needs a presented capability the kernel accepts (a tokenless caller
// acting under the dev capability is not authenticated), and it is signed
// like the public card. Built per caller, it is not cached.
func (e *Edge) extendedCard(rc rpcCall, v wire.Version) (any, *wire.Error) {
	if rc.stdio {
		return nil, wire.ExtendedCardNotConfigured() // the stdio card has none
	}
	if rc.caller.dev {
		// The dev capability acts for tokenless callers; it does not make
		// them authenticated, and this card is for authenticated callers.
		return nil, wire.Unauthenticated("the extended agent card is for authenticated callers: present a capability (Authorization: Bearer or X-Chio-Capability)")
	}
	id, d := e.kernel.Identify(rc.caller.token)
	if d != nil {
		return nil, wire.Unauthenticated(fmt.Sprintf("capability refused at %s: %s", d.Guard, d.Reason))
	}
	origin := rc.origin
	if origin == "" {
		origin = strings.TrimRight(e.cfg.PublicURL, "/")
	}
	c := e.card(origin, tools.A2AProfile{GRPC: e.cfg.GRPCURL != ""}, e.cfg.DevToken == "", func(en *tools.Entry) bool {
		return id.Invokes(en.Manifest.ServerID, en.Tool.Name)
	})
	dialect := wire.V10
	if v != wire.V10 {
		dialect = wire.V03
	}
	body, err := wire.EncodeAgentCardFor(c, dialect)
	if err == nil {
		e.cardInit()
		if err = e.cards.initErr; err == nil && e.cards.signer != nil {
			body, err = e.cards.signer.Sign(body, origin+cardsig.JWKSPath)
		}
	}
	if err != nil {
		return nil, wire.InternalError("extended agent card: " + err.Error())
	}
	return json.RawMessage(body), nil
}
