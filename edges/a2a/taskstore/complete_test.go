package taskstore

import (
	"context"
	"encoding/json"
	"fmt"
)

// complete is a test helper, not API: the edge ends its tasks with its own
// commits through Transition (edges/a2a, finish), and so does this.
//
// complete ends a task in final (completed, failed or rejected) with the
// status message, appending artifacts and linking receipt ids in the
// same commit. If the task is already terminal (typically canceled while
// it ran) it returns ErrAlreadyTerminal with the task and writes nothing:
// the cancel wins and the result is discarded.
func complete(ctx context.Context, s *Store, id string, owner Owner, final State, statusMessage json.RawMessage, artifacts []json.RawMessage, receiptIDs []string) (*Task, error) {
	switch final {
	case StateCompleted, StateFailed, StateRejected:
	default:
		return nil, fmt.Errorf("complete task %s: %w: final state %q", id, ErrInvalidArgument, final)
	}
	t, err := s.Transition(ctx, id, owner, func(t *Task) ([]Event, error) {
		if t.State.Terminal() {
			return nil, fmt.Errorf("%w (%s)", ErrAlreadyTerminal, t.State)
		}
		events := make([]Event, 0, len(artifacts)+len(receiptIDs)+1)
		for _, a := range artifacts {
			events = append(events, ArtifactEvent(a))
		}
		for _, r := range receiptIDs {
			events = append(events, ReceiptEvent(r))
		}
		return append(events, FinishEvent(final, statusMessage)), nil
	})
	if err != nil {
		return t, fmt.Errorf("complete: %w", err)
	}
	return t, nil
}
