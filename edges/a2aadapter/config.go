package a2aadapter

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// Authorizer returns the HTTP client that carries the partner's credentials
// and the names of the card's security schemes it satisfies. It is called
// once, at Discover, with the card in the A2A 1.0 type (a 0.3 card is
// converted first). An error makes every call of the adapter fail locally;
// the error must not contain secrets.
type Authorizer func(ctx context.Context, card *a2a.AgentCard) (client *http.Client, schemes []string, err error)

// Policy is the operator's admission contract for a partner: Discover fails
// with a *PolicyError naming the first contract the card breaks.
type Policy struct {
	// Partner labels the partner in reports and task records.
	Partner string
	// RequiredTenant, when set, is the tenant the chosen interface must
	// advertise.
	RequiredTenant string
	// RequireSkills are skill ids the card must expose.
	RequireSkills []string
	// RequireSchemes are security scheme names the card must declare and
	// require.
	RequireSchemes []string
	// AllowOrigins, when set, are the only origins (scheme://host[:port])
	// an interface may be chosen from.
	AllowOrigins []string
}

// Config configures Discover.
type Config struct {
	// Target is a base URL (the card is at /.well-known/agent-card.json
	// under it) or, when its path ends in ".json", the card's own URL.
	Target string
	// Discovery fetches the card (TLS roots, mTLS); nil means a default
	// client with timeouts. Without an Authorizer it also makes the calls.
	Discovery *http.Client
	// Authorize supplies credentials; nil means none, and a card that
	// requires any then denies every call locally.
	Authorize Authorizer
	// Policy is the partner admission contract.
	Policy Policy
	// Tasks records observed upstream tasks; nil refuses every follow-up.
	Tasks *TaskRegistry
	// PartnerServerID is the partner's Chio server id when the partner is
	// a Chio edge: outgoing messages then carry
	// metadata.chio.governedIntent naming (PartnerServerID, skill id) with
	// the caller's call chain extended.
	PartnerServerID string
	// Log receives discovery and call diagnostics; nil means slog.Default().
	Log *slog.Logger
}
