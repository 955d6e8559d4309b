package wire

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Task generations (A2A 1.1 draft, a2aproject/A2A #1810, epic #1986): a
// task's generation starts at 1 and grows by exactly 1 per client-visible
// mutation (a status update or an artifact update), each of which a stream
// carries as exactly one event. Until 1.1 is final the edge offers them as
// an extension. A2A 1.0's JSON schemas allow no field beyond their own on
// a Task or an update event, so the generation is served in metadata,
// keyed by the extension's URI as the A2A extension guide asks:
//
//   - Task.metadata, TaskStatusUpdateEvent.metadata and
//     TaskArtifactUpdateEvent.metadata carry GenerationKey: the task's
//     generation (after the mutation, for an event), a JSON number;
//   - every SSE event's id is that generation, and a SubscribeToTask with
//     the Last-Event-ID header (or params.metadata[LastGenerationKey])
//     replays exactly the events after it;
//   - SendMessage's configuration.ifGenerationMatch (the draft's field;
//     params.metadata[IfGenerationMatchKey] for strict 1.0 clients) makes a
//     follow-up conditional on the task's generation: a mismatch is
//     GenerationMismatch (-32010, HTTP 409, gRPC ABORTED).
const (
	// TaskGenerationExtensionURI names the extension on the agent card.
	TaskGenerationExtensionURI = "https://chio.dev/a2a/ext/task-generation/v1"
	// GenerationKey is the metadata key of a task's or event's generation.
	GenerationKey = TaskGenerationExtensionURI + "/generation"
	// LastGenerationKey is the SubscribeToTask params.metadata key naming
	// the last generation the client has (as Last-Event-ID does).
	LastGenerationKey = TaskGenerationExtensionURI + "/lastGeneration"
	// IfGenerationMatchKey is the SendMessage params.metadata key
	// equivalent to configuration.ifGenerationMatch.
	IfGenerationMatchKey = TaskGenerationExtensionURI + "/ifGenerationMatch"
)

// TaskGenerationExtension is the agent card's declaration of the
// extension (capabilities.extensions); clients need not activate it.
func TaskGenerationExtension() AgentExtension {
	return AgentExtension{
		URI: TaskGenerationExtensionURI,
		Description: "Task generations (A2A 1.1 draft): metadata[\"" + GenerationKey + "\"] on tasks and update events " +
			"and the SSE event id carry the task's generation; SubscribeToTask with Last-Event-ID replays the events " +
			"after it, from any replica; SendMessage configuration.ifGenerationMatch (or metadata[\"" +
			IfGenerationMatchKey + "\"]) is checked atomically with the turn it starts (-32010 on mismatch).",
	}
}

// GenerationEventID is the SSE event id of the event at generation g.
func GenerationEventID(g int64) string { return strconv.FormatInt(g, 10) }

// ParseGeneration parses a generation as a Last-Event-ID carries it: a
// decimal integer of at least 1.
func ParseGeneration(s string) (int64, error) {
	g, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || g < 1 {
		return 0, fmt.Errorf("%q is not a task generation (an integer of at least 1)", s)
	}
	return g, nil
}

// MetadataGeneration reads a generation from decoded metadata: a JSON
// number or, as ProtoJSON writes an int64, a decimal string; nil when
// absent. field names it in the error.
func MetadataGeneration(meta map[string]any, key, field string) (*int64, *Error) {
	v, ok := meta[key]
	if !ok || v == nil {
		return nil, nil
	}
	g, err := generationValue(v)
	if err != nil {
		return nil, fieldError(field, "%s", err.Error())
	}
	return &g, nil
}

func generationValue(v any) (int64, error) {
	switch x := v.(type) {
	case float64:
		if x != math.Trunc(x) || x < 0 || x > 1<<53 {
			return 0, fmt.Errorf("must be a non-negative integer")
		}
		return int64(x), nil
	case json.Number:
		return generationValue(string(x))
	case string:
		g, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64)
		if err != nil || g < 0 {
			return 0, fmt.Errorf("must be a non-negative integer")
		}
		return g, nil
	}
	return 0, fmt.Errorf("must be a non-negative integer")
}

// int64Field reads an int64 field as ProtoJSON writes it (a number or a
// decimal string); nil when absent or null.
func (o obj) int64Field(name string) (*int64, *Error) {
	raw, ok := o.get(name)
	if !ok || jsonKind(raw) == '0' {
		return nil, nil
	}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, fieldError(o.field(name), "must be an integer")
	}
	if v == nil {
		return nil, nil
	}
	g, err := generationValue(v)
	if err != nil {
		return nil, fieldError(o.field(name), "%s", err.Error())
	}
	return &g, nil
}
