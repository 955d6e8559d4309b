package a2a

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
)

// maxCachedCards bounds the cache of cards for origins that are not the
// edge's own: without a configured public URL the origin comes from the
// request's Host, which a client chooses. The own origins' cards are kept
// apart, so a client cycling Hosts never evicts them.
const maxCachedCards = 64

// cardCache holds the served card bytes (signed, when the edge has a card
// key and the origin is its own) per origin and dialect: the card of an
// edge never changes once it is built, and signing is the only work worth
// skipping.
type cardCache struct {
	once     sync.Once
	signer   *cardsig.Signer
	initErr  error
	modified time.Time

	mu      sync.Mutex
	origins []string                   // own origins added by AddOrigin
	own     map[cardCacheKey]cardEntry // own origins: a handful, never evicted
	entries map[cardCacheKey]cardEntry // any other origin, bounded
}

type cardCacheKey struct {
	origin  string
	dialect wire.Version
	signed  bool
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

// ownOrigin reports whether origin is one of the edge's own:
// Config.PublicURL, an origin added by AddOrigin, or one of also (the HTTP
// binding's configured PublicURL), compared case-insensitively; it returns
// the configured spelling when it is. The card key signs only cards for an
// own origin: a card's interface URLs and its jku are its origin's, and
// without a configured public URL that origin is the request's Host, which
// the client chooses. Signing it would hand anyone a card signed by the real
// key that points every interface, and the key lookup, at the host they
// named.
func (e *Edge) ownOrigin(origin string, also ...string) (string, bool) {
	e.cards.mu.Lock()
	own := append([]string{e.cfg.PublicURL}, e.cards.origins...)
	e.cards.mu.Unlock()
	for _, o := range append(own, also...) {
		if o = strings.TrimRight(o, "/"); o != "" && strings.EqualFold(o, origin) {
			return o, true
		}
	}
	return origin, false
}

// AddOrigin adds origin (scheme://host[:port]) to the edge's own origins,
// whose cards the card key signs, like Config.PublicURL: for an origin
// known only once the HTTP listener is bound (a listen port of 0). While
// Config.PublicURL is empty, the first origin added stands in for it as the
// origin of cards built off HTTP (the extended card over gRPC). An empty
// origin is ignored.
func (e *Edge) AddOrigin(origin string) {
	if origin = strings.TrimRight(origin, "/"); origin == "" {
		return
	}
	e.cards.mu.Lock()
	defer e.cards.mu.Unlock()
	if !slices.Contains(e.cards.origins, origin) {
		e.cards.origins = append(e.cards.origins, origin)
	}
}

// defaultOrigin is the origin of cards built off HTTP: Config.PublicURL,
// else the first origin added by AddOrigin.
func (e *Edge) defaultOrigin() string {
	if e.cfg.PublicURL != "" {
		return strings.TrimRight(e.cfg.PublicURL, "/")
	}
	e.cards.mu.Lock()
	defer e.cards.mu.Unlock()
	if len(e.cards.origins) > 0 {
		return e.cards.origins[0]
	}
	return ""
}

// CardJSON is the card served to origin in dialect v (wire.V10 or
// wire.V03): the bytes and their ETag. It is signed when the edge has a
// CardKey and origin is Config.PublicURL; a card for any other origin is
// unsigned.
func (e *Edge) CardJSON(origin string, v wire.Version) ([]byte, string, error) {
	en, err := e.cardEntry(strings.TrimRight(origin, "/"), v)
	return en.body, en.etag, err
}

// cardEntry is the card for origin in dialect v, signed when the edge has a
// card key and origin is its own (ownOrigin, with also).
func (e *Edge) cardEntry(origin string, v wire.Version, also ...string) (cardEntry, error) {
	e.cardInit()
	if e.cards.initErr != nil {
		return cardEntry{}, e.cards.initErr
	}
	origin, own := e.ownOrigin(origin, also...)
	signed := own && e.cards.signer != nil
	k := cardCacheKey{origin, v, signed}
	e.cards.mu.Lock()
	en, ok := e.cards.own[k]
	if !ok {
		en, ok = e.cards.entries[k]
	}
	e.cards.mu.Unlock()
	if ok {
		return en, nil
	}
	body, err := wire.EncodeAgentCardFor(e.Card(origin), v)
	if err != nil {
		return cardEntry{}, err
	}
	if signed {
		if body, err = e.cards.signer.Sign(body, origin+cardsig.JWKSPath); err != nil {
			return cardEntry{}, err
		}
	}
	sum := sha256.Sum256(body)
	en = cardEntry{body: body, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
	e.cards.mu.Lock()
	switch {
	case own:
		if e.cards.own == nil {
			e.cards.own = make(map[cardCacheKey]cardEntry)
		}
		e.cards.own[k] = en
	default:
		if e.cards.entries == nil || len(e.cards.entries) >= maxCachedCards {
			e.cards.entries = make(map[cardCacheKey]cardEntry)
		}
		e.cards.entries[k] = en
	}
	e.cards.mu.Unlock()
	return en, nil
}

// extendedCard answers GetExtendedAgentCard (0.3: agent/getAuthenticatedExtendedCard,
// GET /v1/card): the card as its caller sees it, listing only the skills its
// capability may invoke, where the public card lists every exposed one. It
// needs a presented capability the kernel accepts (a tokenless caller
// acting under the dev capability is not authenticated), and it is signed
// like the public card: only for the edge's own origin (ownOrigin), so a
// request naming another Host gets it unsigned. Built per caller, it is not
// cached.
func (e *Edge) extendedCard(ctx context.Context, rc rpcCall) (any, *wire.Error) {
	if rc.stdio {
		return nil, wire.ExtendedCardNotConfigured() // the stdio card has none
	}
	if rc.caller.dev {
		// The dev capability acts for tokenless callers; it does not make
		// them authenticated, and this card is for authenticated callers.
		return nil, wire.Unauthenticated("the extended agent card is for authenticated callers: present a capability (Authorization: DPoP with a DPoP proof, or Authorization: Bearer or X-Chio-Capability for one that cannot delegate)")
	}
	id, werr := e.identify(ctx, rc.caller)
	if werr != nil {
		return nil, werr
	}
	origin := rc.origin
	if origin == "" {
		origin = e.defaultOrigin()
	}
	origin, own := e.ownOrigin(origin)
	c := e.card(origin, tools.A2AProfile{GRPC: e.cfg.GRPCURL != ""}, e.cfg.DevToken == "", func(en *tools.Entry) bool {
		return id.Invokes(en)
	})
	body, err := rc.dialect.EncodeAgentCard(c)
	if err == nil {
		e.cardInit()
		if err = e.cards.initErr; err == nil && own && e.cards.signer != nil {
			body, err = e.cards.signer.Sign(body, origin+cardsig.JWKSPath)
		}
	}
	if err != nil {
		return nil, wire.InternalError("extended agent card: " + err.Error())
	}
	return json.RawMessage(body), nil
}
