package a2a

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/chio-ledger/chio/edges/a2a/cardsig"
	"github.com/chio-ledger/chio/edges/a2a/wire"
	"github.com/chio-ledger/chio/edges/tools"
)

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

// extendedCard answers GetExtendedAgentCard (0.3: agent/getAuthenticatedExtendedCard,
// GET /v1/card): the card as its caller sees it, listing only the skills its
// capability may invoke, where the public card lists every exposed one. It
// needs a presented capability the kernel accepts (a tokenless caller
// acting under the dev capability is not authenticated), and it is signed
// like the public card. Built per caller, it is not cached.
func (e *Edge) extendedCard(rc rpcCall) (any, *wire.Error) {
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
	body, err := rc.dialect.EncodeAgentCard(c)
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
