package a2aadapter

import (
	"fmt"

	"github.com/a2aproject/a2a-go/v2/a2a"
)

// Lifecycle payload validation: what the partner answers must carry the
// fields A2A marks required before it reaches the registry, the kernel or
// the caller. A payload without a task id cannot be followed up, one
// without a state cannot be recorded, and an artifact event without its
// artifact carries nothing.

func malformed(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformedPayload, fmt.Sprintf(format, a...))
}

// checkState refuses a missing or unknown task state.
func checkState(what string, s a2a.TaskState) error {
	switch s {
	case a2a.TaskStateSubmitted, a2a.TaskStateWorking, a2a.TaskStateInputRequired, a2a.TaskStateAuthRequired,
		a2a.TaskStateCompleted, a2a.TaskStateFailed, a2a.TaskStateCanceled, a2a.TaskStateRejected:
		return nil
	case a2a.TaskStateUnspecified:
		return malformed("%s has no status.state", what)
	default:
		return malformed("%s has unknown status.state %q", what, s)
	}
}

// checkTask validates a task: id, status.state and its artifacts.
func checkTask(t *a2a.Task) error {
	if t == nil {
		return malformed("no task")
	}
	if t.ID == "" {
		return malformed("task has no id")
	}
	if err := checkState("task "+string(t.ID), t.Status.State); err != nil {
		return err
	}
	for i, art := range t.Artifacts {
		if err := checkArtifact(fmt.Sprintf("task %s artifacts[%d]", t.ID, i), art); err != nil {
			return err
		}
	}
	return nil
}

func checkArtifact(what string, a *a2a.Artifact) error {
	switch {
	case a == nil:
		return malformed("%s has no artifact", what)
	case a.ID == "":
		return malformed("%s has no artifactId", what)
	case len(a.Parts) == 0:
		return malformed("%s has no parts", what)
	}
	return nil
}

func checkMessage(m *a2a.Message) error {
	switch {
	case m == nil:
		return malformed("no message")
	case m.ID == "":
		return malformed("message has no messageId")
	case m.Role == "":
		return malformed("message %s has no role", m.ID)
	case len(m.Parts) == 0:
		return malformed("message %s has no parts", m.ID)
	}
	return nil
}

// checkEvent validates one stream event and returns the task it names and
// the state it reports (empty when it reports none). *want is the stream's
// task: set by the first event naming one (or by the subscription), every
// later event must name the same, so a stream cannot slip another task's
// id into the registry.
func checkEvent(ev a2a.Event, want *a2a.TaskID) (a2a.TaskID, a2a.TaskState, error) {
	var id a2a.TaskID
	var state a2a.TaskState
	switch v := ev.(type) {
	case *a2a.Task:
		if err := checkTask(v); err != nil {
			return "", "", err
		}
		id, state = v.ID, v.Status.State
	case *a2a.TaskStatusUpdateEvent:
		if v.TaskID == "" {
			return "", "", malformed("statusUpdate has no taskId")
		}
		if err := checkState("statusUpdate of task "+string(v.TaskID), v.Status.State); err != nil {
			return "", "", err
		}
		id, state = v.TaskID, v.Status.State
	case *a2a.TaskArtifactUpdateEvent:
		if v.TaskID == "" {
			return "", "", malformed("artifactUpdate has no taskId")
		}
		if err := checkArtifact("artifactUpdate of task "+string(v.TaskID), v.Artifact); err != nil {
			return "", "", err
		}
		id = v.TaskID
	case *a2a.Message:
		if err := checkMessage(v); err != nil {
			return "", "", err
		}
		id = v.TaskID
	default:
		return "", "", malformed("unknown event %T", ev)
	}
	if id != "" {
		switch {
		case *want == "":
			*want = id
		case id != *want:
			return "", "", malformed("event names task %s in a stream of task %s", id, *want)
		}
	}
	return id, state, nil
}

// lastEvent reports whether ev ends its stream: a lone message, or a task
// or status update in a terminal state.
func lastEvent(ev a2a.Event) bool {
	switch v := ev.(type) {
	case *a2a.Message:
		return true
	case *a2a.Task:
		return ends(v.Status.State)
	case *a2a.TaskStatusUpdateEvent:
		return ends(v.Status.State)
	}
	return false
}

// ends reports a state an A2A 1.0 stream ends on: a terminal state, or
// one that waits for the client (input or authentication required).
func ends(s a2a.TaskState) bool {
	return s.Terminal() || s == a2a.TaskStateInputRequired || s == a2a.TaskStateAuthRequired
}

// checkPushConfig validates a push config the partner returned for taskID.
func checkPushConfig(c *a2a.PushConfig, taskID a2a.TaskID) error {
	switch {
	case c == nil:
		return malformed("no push config")
	case c.URL == "":
		return malformed("push config %s has no url", c.ID)
	case c.TaskID != "" && c.TaskID != taskID:
		return malformed("push config %s names task %s, not %s", c.ID, c.TaskID, taskID)
	}
	return nil
}
