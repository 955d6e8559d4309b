package a2a

import (
	"context"
	"errors"
	"fmt"

	"github.com/chio-ledger/chio/edges/a2a/taskstore"
	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// Task generations at the edge (see wire/generation.go for the wire
// choices and taskstore, "Generations", for the rule): served in metadata
// under wire.GenerationKey, used as SSE event ids, resumed from with
// Last-Event-ID, and checked by ifGenerationMatch.

// lastEventIDKey carries a request's Last-Event-ID header to openStream.
type lastEventIDKey struct{}

// withResumeFrom carries a Last-Event-ID value ("" for none) in ctx; a
// binding without HTTP headers (gRPC: request metadata "last-event-id")
// passes its own.
func withResumeFrom(ctx context.Context, lastEventID string) context.Context {
	if lastEventID != "" {
		return context.WithValue(ctx, lastEventIDKey{}, lastEventID)
	}
	return ctx
}

// resumePoint is the generation a subscription resumes after: the
// Last-Event-ID header, else params.metadata[wire.LastGenerationKey]; 0
// for none. Both name a generation of at least 1, and must agree when both
// are given.
func resumePoint(ctx context.Context, p *wire.CancelTaskParams) (int64, *wire.Error) {
	var from int64
	if h, ok := ctx.Value(lastEventIDKey{}).(string); ok {
		g, err := wire.ParseGeneration(h)
		if err != nil {
			return 0, wire.InvalidParams("Last-Event-ID: "+err.Error(),
				wire.FieldViolation{Field: "Last-Event-ID", Description: "must be a task generation, an event id of this task's stream"})
		}
		from = g
	}
	field := "metadata." + wire.LastGenerationKey
	m, werr := wire.MetadataGeneration(p.Metadata, wire.LastGenerationKey, field)
	switch {
	case werr != nil:
		return 0, werr
	case m == nil:
		return from, nil
	case *m < 1:
		return 0, wire.InvalidParams("", wire.FieldViolation{Field: field, Description: "must be at least 1"})
	case from != 0 && *m != from:
		return 0, wire.InvalidParams("", wire.FieldViolation{Field: field, Description: "contradicts Last-Event-ID"})
	}
	return *m, nil
}

// ifGenerationMatch is a send's precondition: configuration.ifGenerationMatch
// (the 1.1 draft's field), else params.metadata[wire.IfGenerationMatchKey];
// nil for none. Both must agree when both are given.
func ifGenerationMatch(p *wire.SendParams) (*int64, *wire.Error) {
	field := "metadata." + wire.IfGenerationMatchKey
	m, werr := wire.MetadataGeneration(p.Metadata, wire.IfGenerationMatchKey, field)
	c := p.Configuration.IfGenerationMatch
	switch {
	case werr != nil:
		return nil, werr
	case c != nil && m != nil && *c != *m:
		return nil, wire.InvalidParams("", wire.FieldViolation{Field: field, Description: "contradicts configuration.ifGenerationMatch"})
	case c != nil:
		return c, nil
	}
	return m, nil
}

// generationMismatch is a send's precondition failing against the task as
// the write would land on it.
type generationMismatch struct {
	taskID            string
	expected, current int64
}

func (g *generationMismatch) Error() string {
	return fmt.Sprintf("task %s: generation is %d, not %d", g.taskID, g.current, g.expected)
}

// checkGeneration is the send's precondition against t: nil when it has
// none or it holds. accept checks it on the task it loads (a stale client
// learns so before anything else), continueTask again inside the
// compare-and-set that starts the turn, which is what makes it atomic.
func checkGeneration(p *wire.SendParams, t *taskstore.Task) error {
	want, werr := ifGenerationMatch(p)
	if werr != nil {
		return werr
	}
	if want != nil && *want != t.Generation {
		return &generationMismatch{taskID: t.ID, expected: *want, current: t.Generation}
	}
	return nil
}

// generationError is the wire error of a failed precondition (or of a
// malformed one), nil for any other error.
func generationError(err error) *wire.Error {
	var gm *generationMismatch
	if errors.As(err, &gm) {
		return wire.GenerationMismatch(gm.taskID, gm.expected, gm.current)
	}
	var werr *wire.Error
	if errors.As(err, &werr) {
		return werr
	}
	return nil
}

// withGeneration sets wire.GenerationKey in meta (made if nil) to g; a
// zero g (a task not stored yet) leaves meta as it is.
func withGeneration(meta map[string]any, g int64) map[string]any {
	if g <= 0 {
		return meta
	}
	if meta == nil {
		meta = map[string]any{}
	}
	meta[wire.GenerationKey] = g
	return meta
}
