package a2aadapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// modeSend is the mode of arguments without a follow-up mode.
const modeSend = "send"

// chioKey is the metadata key the adapter writes (selector, governed
// intent); a caller may not set it, or it could forge either.
const chioKey = "chio"

// args are decoded tool arguments; see inputSchema for the contract.
type args struct {
	Message           *string         `json:"message"`
	Data              json.RawMessage `json:"data"`
	ContextID         *string         `json:"context_id"`
	TaskID            *string         `json:"task_id"`
	ReferenceTaskIDs  []string        `json:"reference_task_ids"`
	Metadata          map[string]any  `json:"metadata"`
	MessageMetadata   map[string]any  `json:"message_metadata"`
	HistoryLength     *int            `json:"history_length"`
	ReturnImmediately *bool           `json:"return_immediately"`
	Stream            *bool           `json:"stream"`

	GetTask          *getTaskArgs    `json:"get_task"`
	SubscribeTask    *taskRefArgs    `json:"subscribe_task"`
	CancelTask       *cancelTaskArgs `json:"cancel_task"`
	CreatePushConfig *createPushArgs `json:"create_push_config"`
	GetPushConfig    *pushRefArgs    `json:"get_push_config"`
	ListPushConfigs  *listPushArgs   `json:"list_push_configs"`
	DeletePushConfig *pushRefArgs    `json:"delete_push_config"`

	// mode is modeSend or the follow-up mode present.
	mode string
	// data is Data decoded; hasData reports a non-null Data.
	data    any
	hasData bool
}

type getTaskArgs struct {
	ID            string `json:"id"`
	HistoryLength *int   `json:"history_length"`
}

type taskRefArgs struct {
	ID string `json:"id"`
}

type cancelTaskArgs struct {
	ID       string         `json:"id"`
	Metadata map[string]any `json:"metadata"`
}

type createPushArgs struct {
	TaskID         string        `json:"task_id"`
	URL            string        `json:"url"`
	ID             string        `json:"id"`
	Token          string        `json:"token"`
	Authentication *pushAuthArgs `json:"authentication"`
}

type pushAuthArgs struct {
	Scheme      string `json:"scheme"`
	Credentials string `json:"credentials"`
}

type pushRefArgs struct {
	TaskID string `json:"task_id"`
	ID     string `json:"id"`
}

type listPushArgs struct {
	TaskID    string `json:"task_id"`
	PageSize  int    `json:"page_size"`
	PageToken string `json:"page_token"`
}

// parseArgs decodes and validates raw against the contract the card
// allows. Every refusal wraps ErrInvalidArguments or ErrNotAdvertised and
// happens before any upstream call.
func parseArgs(raw json.RawMessage, f features) (*args, error) {
	a := &args{}
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	// The strict reader refuses repeated members (exact, case variants,
	// escaped), deep nests, bad UTF-8 and trailing data anywhere in the
	// arguments. Names are matched exactly and unknown ones refused: the
	// kernel's guards read members by exact name, so {"MESSAGE":"long"}
	// must not reach message past a constraint on /message. Numbers stay
	// json.Number: large integers in data and metadata exact.
	if err := strictjson.UnmarshalExactKnown(raw, a); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArguments, err)
	}
	if err := a.decodeData(); err != nil {
		return nil, err
	}
	if err := a.pickMode(); err != nil {
		return nil, err
	}
	if a.mode == modeSend {
		return a, a.checkSend(f)
	}
	return a, a.checkFollowUp(f)
}

func (a *args) decodeData() error {
	if len(a.Data) == 0 || string(bytes.TrimSpace(a.Data)) == "null" {
		return nil
	}
	if err := strictjson.Unmarshal(a.Data, &a.data); err != nil {
		return fmt.Errorf("%w: data: %w", ErrInvalidArguments, err)
	}
	a.hasData = true
	return nil
}

// pickMode finds the one follow-up mode, refusing two of them or one
// mixed with send fields.
func (a *args) pickMode() error {
	var modes []string
	for _, m := range []struct {
		name string
		set  bool
	}{
		{ModeGetTask, a.GetTask != nil}, {ModeSubscribeTask, a.SubscribeTask != nil},
		{ModeCancelTask, a.CancelTask != nil}, {ModeCreatePushConfig, a.CreatePushConfig != nil},
		{ModeGetPushConfig, a.GetPushConfig != nil}, {ModeListPushConfigs, a.ListPushConfigs != nil},
		{ModeDeletePushConfig, a.DeletePushConfig != nil},
	} {
		if m.set {
			modes = append(modes, m.name)
		}
	}
	switch {
	case len(modes) > 1:
		return fmt.Errorf("%w: one follow-up mode at a time, got %s", ErrInvalidArguments, strings.Join(modes, ", "))
	case len(modes) == 0:
		a.mode = modeSend
		return nil
	}
	a.mode = modes[0]
	if send := a.sendFields(); len(send) > 0 {
		return fmt.Errorf("%w: %s is mutually exclusive with the send fields (%s)", ErrInvalidArguments, a.mode, strings.Join(send, ", "))
	}
	return nil
}

// sendFields names the send fields present.
func (a *args) sendFields() []string {
	var out []string
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"message", a.Message != nil}, {"data", len(a.Data) > 0}, {"context_id", a.ContextID != nil},
		{"task_id", a.TaskID != nil}, {"reference_task_ids", a.ReferenceTaskIDs != nil},
		{"metadata", a.Metadata != nil}, {"message_metadata", a.MessageMetadata != nil},
		{"history_length", a.HistoryLength != nil}, {"return_immediately", a.ReturnImmediately != nil},
		{"stream", a.Stream != nil},
	} {
		if f.set {
			out = append(out, f.name)
		}
	}
	return out
}

func (a *args) checkSend(f features) error {
	switch {
	case a.Message == nil && !a.hasData:
		return fmt.Errorf("%w: send needs message or data", ErrInvalidArguments)
	case a.Message != nil && *a.Message == "":
		return fmt.Errorf("%w: message is empty (omit it to send data alone)", ErrInvalidArguments)
	case a.Stream != nil && *a.Stream && !f.streaming:
		return fmt.Errorf("stream: streaming is %w", ErrNotAdvertised)
	}
	if err := checkHistory(a.HistoryLength, f); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    *string
	}{{"context_id", a.ContextID}, {"task_id", a.TaskID}} {
		if f.v != nil && !schemas.ValidName(*f.v) {
			return fmt.Errorf("%w: %s must be 1 to 256 bytes of text", ErrInvalidArguments, f.name)
		}
	}
	for i, id := range a.ReferenceTaskIDs {
		if !schemas.ValidName(id) {
			return fmt.Errorf("%w: reference_task_ids[%d] must be 1 to 256 bytes of text", ErrInvalidArguments, i)
		}
	}
	for _, f := range []struct {
		name string
		m    map[string]any
	}{{"metadata", a.Metadata}, {"message_metadata", a.MessageMetadata}} {
		if _, ok := f.m[chioKey]; ok {
			return fmt.Errorf("%w: %s.%s is reserved for the adapter", ErrInvalidArguments, f.name, chioKey)
		}
	}
	return nil
}

func (a *args) checkFollowUp(f features) error {
	if a.CancelTask != nil {
		if _, ok := a.CancelTask.Metadata[chioKey]; ok {
			return fmt.Errorf("%w: cancel_task.metadata.%s is reserved for the adapter", ErrInvalidArguments, chioKey)
		}
	}
	id := func(field, v string) error {
		if !schemas.ValidName(v) {
			return fmt.Errorf("%w: %s.%s must be 1 to 256 bytes of text", ErrInvalidArguments, a.mode, field)
		}
		return nil
	}
	switch a.mode {
	case ModeGetTask:
		if err := checkHistory(a.GetTask.HistoryLength, f); err != nil {
			return err
		}
		return id("id", a.GetTask.ID)
	case ModeCancelTask:
		return id("id", a.CancelTask.ID)
	case ModeSubscribeTask:
		if !f.streaming {
			return fmt.Errorf("%s: streaming is %w", a.mode, ErrNotAdvertised)
		}
		return id("id", a.SubscribeTask.ID)
	}
	if !f.push {
		return fmt.Errorf("%s: push notifications are %w", a.mode, ErrNotAdvertised)
	}
	switch a.mode {
	case ModeCreatePushConfig:
		c := a.CreatePushConfig
		if _, err := checkURL(c.URL); err != nil {
			return fmt.Errorf("%w: %s.url: %w", ErrInvalidArguments, a.mode, err)
		}
		if c.ID != "" {
			if err := id("id", c.ID); err != nil {
				return err
			}
		}
		if c.Authentication != nil && !schemas.ValidName(c.Authentication.Scheme) {
			return fmt.Errorf("%w: %s.authentication.scheme is required", ErrInvalidArguments, a.mode)
		}
		return id("task_id", c.TaskID)
	case ModeGetPushConfig, ModeDeletePushConfig:
		r := a.GetPushConfig
		if r == nil {
			r = a.DeletePushConfig
		}
		return errors.Join(id("task_id", r.TaskID), id("id", r.ID))
	default: // ModeListPushConfigs
		l := a.ListPushConfigs
		if l.PageSize < 0 || l.PageSize > 100 {
			return fmt.Errorf("%w: %s.page_size must be 1 to 100", ErrInvalidArguments, a.mode)
		}
		return id("task_id", l.TaskID)
	}
}

func checkHistory(n *int, f features) error {
	switch {
	case n == nil:
		return nil
	case !f.history:
		return fmt.Errorf("history_length: the interface's history length is %w (A2A 0.3 without capabilities.stateTransitionHistory)", ErrNotAdvertised)
	case *n < 0:
		return fmt.Errorf("%w: history_length must be at least 0", ErrInvalidArguments)
	}
	return nil
}

// streams reports whether the call produces a stream of events.
func (a *args) streams() bool {
	return a.mode == ModeSubscribeTask || (a.mode == modeSend && a.Stream != nil && *a.Stream)
}

// startsTask reports whether the call may start a new upstream task: a
// send that does not continue one.
func (a *args) startsTask() bool {
	return a.mode == modeSend && a.TaskID == nil
}

// followUpTasks are the task ids the call refers to, which the registry
// must have recorded for this tool: a follow-up's task, or a send's task_id
// and reference_task_ids (continuing or citing another tool's task would
// cross the per-tool boundary the registry draws).
func (a *args) followUpTasks() []string {
	switch a.mode {
	case modeSend:
		var ids []string
		if a.TaskID != nil {
			ids = append(ids, *a.TaskID)
		}
		return append(ids, a.ReferenceTaskIDs...)
	case ModeGetTask:
		return []string{a.GetTask.ID}
	case ModeSubscribeTask:
		return []string{a.SubscribeTask.ID}
	case ModeCancelTask:
		return []string{a.CancelTask.ID}
	case ModeCreatePushConfig:
		return []string{a.CreatePushConfig.TaskID}
	case ModeGetPushConfig:
		return []string{a.GetPushConfig.TaskID}
	case ModeListPushConfigs:
		return []string{a.ListPushConfigs.TaskID}
	default:
		return []string{a.DeletePushConfig.TaskID}
	}
}
