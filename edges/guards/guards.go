// Package guards holds the kernel's stateless guards: argument constraints
// from the capability grant, forbidden and allowed paths, an egress
// allowlist and a secret-leak scanner, plus Run, the pipeline helper that
// turns their verdicts into receipt evidence.
//
// Every guard is deterministic (no DNS, no clock, no I/O) so that any edge
// replica reaches the same decision for the same call, and cheap: all
// patterns are compiled at construction and the allow path does no
// allocation beyond decoding the arguments once per call.
package guards

import (
	"github.com/chio-ledger/chio/schemas/strictjson"

	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/chio-ledger/chio/schemas"
)

// MaxDetails bounds a guard's details in the evidence: they go into every
// signed receipt, so one noisy guard must not bloat the log.
const MaxDetails = 1024

// Call is what a guard sees of one tool call. A Call caches its decoded
// arguments, so it is not safe for concurrent use: run a call's guards
// one after the other (as Run does).
type Call struct {
	CapabilityID string
	Subject      string // caller's public key, lowercase hex
	// RootSubject is the first delegatee of the chain (Subject itself when
	// the token is not delegated): per-principal limits key on it, since a
	// holder chooses the subjects of the tokens it delegates.
	RootSubject string
	ServerID    string
	ToolName    string
	Operation   schemas.Operation
	Arguments   json.RawMessage    // the call's arguments (any JSON value, usually an object)
	Grant       *schemas.ToolGrant // the grant that matched (may be nil in tests of non-constraint guards)
	GrantIndex  int
	Constraints *ConstraintSet // compiled Grant.Constraints (nil = none); the kernel compiles once per verified token

	args    any
	argsErr error
	decoded bool
}

// Args decodes Arguments once and caches the result, so that every guard
// of the pipeline shares one decode. Values are as json.Decoder with
// UseNumber gives them (map[string]any, []any, string, json.Number, bool,
// nil), but the document is held to a stricter standard: trailing data and
// duplicate object keys are errors, because a tool whose parser keeps the
// first of two duplicate keys would see another call than the guards did.
// Empty Arguments (a call without arguments) decode as null.
func (c *Call) Args() (any, error) {
	if c == nil {
		return nil, errors.New("decode arguments: no call")
	}
	if !c.decoded {
		c.args, c.argsErr = strictjson.Parse(c.Arguments)
		if c.argsErr != nil {
			c.args, c.argsErr = nil, fmt.Errorf("decode arguments: %w", c.argsErr)
		}
		c.decoded = true
	}
	return c.args, c.argsErr
}

// Result is a guard's verdict. Details explain a deny (or note something on
// allow); they must never echo secrets and stay under MaxDetails bytes.
type Result struct {
	Allow   bool
	Details string
}

// Guard is one check of the pipeline.
type Guard interface {
	Name() string
	// Check decides on c. An error means the guard could not decide: the
	// kernel then denies (fail closed).
	Check(ctx context.Context, c *Call) (Result, error)
}

// Run runs guards in order; the first deny or error stops. It returns the
// evidence of every guard that ran (verdict true = passed; an erroring
// guard is recorded as failed with details "error: … (fail-closed)") and,
// on deny, the denying guard's name and a reason such as
// `guard "PathGuard" denied the request: <details>`.
func Run(ctx context.Context, gs []Guard, c *Call) (evidence []schemas.GuardEvidence, deniedBy string, reason string) {
	if ctx == nil {
		ctx = context.Background()
	}
	evidence = make([]schemas.GuardEvidence, 0, len(gs))
	for _, g := range gs {
		name, res, err := runGuard(ctx, g, c)
		if err != nil {
			res = Result{Details: "error: " + err.Error() + " (fail-closed)"}
		}
		details := truncateDetails(res.Details)
		evidence = append(evidence, schemas.GuardEvidence{GuardName: name, Verdict: res.Allow, Details: details})
		if !res.Allow {
			reason = fmt.Sprintf("guard %q denied the request", name)
			if details != "" {
				reason += ": " + details
			}
			return evidence, name, reason
		}
	}
	return evidence, "", ""
}

// runGuard names and runs one guard, turning a canceled context, a
// missing guard or call and a panicking guard into errors, so that a
// broken guard denies the call instead of allowing it or crashing the
// kernel. The name is non-empty, as the receipt schema requires.
func runGuard(ctx context.Context, g Guard, c *Call) (name string, res Result, err error) {
	if g == nil {
		return "NilGuard", Result{}, errors.New("run guard: nil guard")
	}
	name = "UnnamedGuard"
	defer func() {
		if recover() != nil {
			// The panic value is not reported: it may hold argument data.
			res, err = Result{}, errors.New("run guard: guard panicked")
		}
	}()
	if n := g.Name(); n != "" {
		name = truncateDetails(n)
	}
	if c == nil {
		return name, Result{}, errors.New("run guard: nil call")
	}
	if err := ctx.Err(); err != nil {
		return name, Result{}, fmt.Errorf("run guard: %w", err)
	}
	res, err = g.Check(ctx, c)
	return name, res, err
}

// truncateDetails cuts s to MaxDetails bytes of valid UTF-8, marking a cut
// with an ellipsis.
func truncateDetails(s string) string {
	if len(s) <= MaxDetails && utf8.ValidString(s) {
		return s
	}
	return abbreviate(s, MaxDetails)
}

// abbreviate cuts s to at most n bytes (n ≥ 3) of valid UTF-8, ending a
// cut string with "…".
func abbreviate(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
