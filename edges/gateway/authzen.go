package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/internal/identity"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// The AuthZEN Authorization API 1.0 paths this point serves.
const (
	EvaluationPath  = "/access/v1/evaluation"
	EvaluationsPath = "/access/v1/evaluations"
	MetadataPath    = "/.well-known/authzen-configuration"
)

// Limits of an AuthZEN request.
const (
	// MaxEvaluations bounds a batch: each item is a kernel decision and a
	// durable write.
	MaxEvaluations = 64
	// maxEvaluationBody bounds a request body.
	maxEvaluationBody = 1 << 20
)

// The AuthZEN mapping onto a governed call.
const (
	// ResourceType is the resource type of a tool; its id is the tool's
	// name and properties.server its server id (needed only when two
	// servers offer a tool of that name).
	ResourceType = "tool"
	// ActionCall is the action of calling a tool: MCP's method name, as
	// the AuthZEN MCP binding maps tools/call.
	ActionCall = "tools/call"
	// SubjectTokenProperty is the subject property that carries its
	// credential: a capability (compact or header form) or an identity
	// provider's access token.
	SubjectTokenProperty = "token"
	// ArgumentsContextKey is the context member that carries the call's
	// arguments (an object; absent means {}).
	ArgumentsContextKey = "arguments"
)

// requestIDHeader is echoed on every answer, as AuthZEN requires.
const requestIDHeader = "X-Request-ID"

// entity is an AuthZEN subject or resource.
type entity struct {
	Type       string                     `json:"type"`
	ID         string                     `json:"id"`
	Properties map[string]json.RawMessage `json:"properties,omitempty"`
}

// action is an AuthZEN action.
type action struct {
	Name       string                     `json:"name"`
	Properties map[string]json.RawMessage `json:"properties,omitempty"`
}

// evaluation is one AuthZEN access evaluation request, or one item (or
// the defaults) of a batch.
type evaluation struct {
	Subject  *entity                    `json:"subject,omitempty"`
	Action   *action                    `json:"action,omitempty"`
	Resource *entity                    `json:"resource,omitempty"`
	Context  map[string]json.RawMessage `json:"context,omitempty"`
}

// evaluations is a batch request.
type evaluations struct {
	evaluation
	Evaluations []evaluation `json:"evaluations"`
	Options     struct {
		Semantic string `json:"evaluations_semantic,omitempty"`
	} `json:"options"`
}

// The batch semantics of AuthZEN.
const (
	executeAll          = "execute_all"
	denyOnFirstDeny     = "deny_on_first_deny"
	permitOnFirstPermit = "permit_on_first_permit"
)

// Decision is an AuthZEN decision.
type Decision struct {
	Decision bool           `json:"decision"`
	Context  map[string]any `json:"context,omitempty"`
}

// ServeMetadata answers the AuthZEN metadata document. The decision
// point is named by the URL the PEP fetched it from, as AuthZEN requires
// of policy_decision_point (the PEP reaches it directly, not through the
// gateway).
func (p *Point) ServeMetadata(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	pdp := scheme + "://" + r.Host
	writeJSON(w, http.StatusOK, map[string]any{
		"policy_decision_point":       pdp,
		"access_evaluation_endpoint":  pdp + EvaluationPath,
		"access_evaluations_endpoint": pdp + EvaluationsPath,
	})
}

// ServeEvaluation answers one access evaluation.
func (p *Point) ServeEvaluation(w http.ResponseWriter, r *http.Request) {
	echoRequestID(w, r)
	var ev evaluation
	if !readRequest(w, r, &ev) {
		return
	}
	if err := ev.complete(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	d, err := p.evaluate(r.Context(), ev, r.Header.Get(requestIDHeader))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, d)
}

// ServeEvaluations answers a batch, in request order. Items are decided
// one after another (a budget is charged in the order the PEP gave); the
// short-circuiting semantics stop after the deciding item, which is
// where the answer ends.
func (p *Point) ServeEvaluations(w http.ResponseWriter, r *http.Request) {
	echoRequestID(w, r)
	var req evaluations
	if !readRequest(w, r, &req) {
		return
	}
	switch req.Options.Semantic {
	case "", executeAll, denyOnFirstDeny, permitOnFirstPermit:
	default:
		writeError(w, http.StatusBadRequest, fmt.Sprintf("options.evaluations_semantic %q: want %s, %s or %s",
			abbreviate(req.Options.Semantic), executeAll, denyOnFirstDeny, permitOnFirstPermit))
		return
	}
	rid := r.Header.Get(requestIDHeader)
	if len(req.Evaluations) == 0 {
		// No array: the request is a single evaluation, answered as one.
		if err := req.evaluation.complete(); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		d, err := p.evaluate(r.Context(), req.evaluation, rid)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, d)
		return
	}
	if len(req.Evaluations) > MaxEvaluations {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("evaluations: %d items, at most %d in one request", len(req.Evaluations), MaxEvaluations))
		return
	}
	out := make([]Decision, 0, len(req.Evaluations))
	for i, item := range req.Evaluations {
		ev := req.evaluation.with(item)
		var d Decision
		if err := ev.complete(); err != nil {
			d = itemError(http.StatusBadRequest, fmt.Sprintf("evaluations[%d]: %v", i, err))
		} else if d, err = p.evaluate(r.Context(), ev, rid); err != nil {
			d = itemError(http.StatusServiceUnavailable, fmt.Sprintf("evaluations[%d]: %v", i, err))
		}
		out = append(out, d)
		if (req.Options.Semantic == denyOnFirstDeny && !d.Decision) || (req.Options.Semantic == permitOnFirstPermit && d.Decision) {
			break
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"evaluations": out})
}

// with is the batch item over the defaults d: each member the item sets
// replaces the default's.
func (d evaluation) with(item evaluation) evaluation {
	if item.Subject != nil {
		d.Subject = item.Subject
	}
	if item.Action != nil {
		d.Action = item.Action
	}
	if item.Resource != nil {
		d.Resource = item.Resource
	}
	if item.Context != nil {
		d.Context = item.Context
	}
	return d
}

// complete checks that ev names a subject, an action and a resource in
// the mapping Chio reads.
func (ev evaluation) complete() error {
	switch {
	case ev.Subject == nil:
		return errors.New("subject is required")
	case ev.Subject.Type == "" || ev.Subject.ID == "":
		return errors.New("subject: type and id are required")
	case ev.Action == nil || ev.Action.Name == "":
		return errors.New("action: name is required")
	case ev.Resource == nil:
		return errors.New("resource is required")
	case ev.Resource.Type == "" || ev.Resource.ID == "":
		return errors.New("resource: type and id are required")
	}
	if _, err := ev.token(); err != nil {
		return err
	}
	if _, err := stringProperty(ev.Resource.Properties, "server", "resource"); err != nil {
		return err
	}
	if raw, ok := ev.Context[ArgumentsContextKey]; ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil || m == nil {
			return fmt.Errorf("context.%s must be an object", ArgumentsContextKey)
		}
	}
	return nil
}

// token is the subject's credential ("" when it has none: an unknown
// subject, denied with a receipt).
func (ev evaluation) token() (string, error) {
	return stringProperty(ev.Subject.Properties, SubjectTokenProperty, "subject")
}

func stringProperty(props map[string]json.RawMessage, key, of string) (string, error) {
	raw, ok := props[key]
	if !ok {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("%s.properties.%s must be a string", of, key)
	}
	return s, nil
}

// evaluate decides one complete evaluation. It returns an error only
// when no receipt will exist for it (the decision was not durable).
func (p *Point) evaluate(ctx context.Context, ev evaluation, requestID string) (Decision, error) {
	switch {
	case ev.Action.Name != ActionCall:
		// Well formed, but nothing Chio governs: no tool is named, so
		// there is no call to sign a receipt of.
		return itemError(http.StatusNotFound, fmt.Sprintf("action %q: this decision point decides %q", abbreviate(ev.Action.Name), ActionCall)), nil
	case ev.Resource.Type != ResourceType:
		return itemError(http.StatusNotFound, fmt.Sprintf("resource type %q: this decision point decides resources of type %q", abbreviate(ev.Resource.Type), ResourceType)), nil
	}
	token, _ := ev.token()
	server, _ := stringProperty(ev.Resource.Properties, "server", "resource")
	tool := ev.Resource.ID
	if server == "" {
		var e *tools.Entry
		err := errors.New("no tool registry")
		if p.registry != nil {
			e, err = p.registry.ResolveTool(p.authzen, tool)
		}
		if err != nil {
			// As the A2A edge answers an unknown skill: no call is named,
			// and a hidden tool is not told apart from a missing one.
			msg := fmt.Sprintf("resource: no tool %q is offered here", abbreviate(tool))
			if errors.Is(err, tools.ErrAmbiguousTool) {
				msg = fmt.Sprintf("resource: several servers offer %q: name one in resource.properties.server", abbreviate(tool))
			}
			return itemError(http.StatusNotFound, msg), nil
		}
		server = e.Manifest.ServerID
	}
	args := json.RawMessage(`{}`)
	if raw, ok := ev.Context[ArgumentsContextKey]; ok {
		args = raw
	}
	meta := map[string]any{"protocol": "authzen", "authzen": map[string]any{
		"subject": map[string]any{"type": schemas.TruncateText(ev.Subject.Type), "id": schemas.TruncateText(ev.Subject.ID)},
		"action":  ev.Action.Name,
	}}
	if requestID != "" {
		meta["authzen"].(map[string]any)["request_id"] = schemas.TruncateText(requestID)
	}
	call := dispatch.Call{Token: token, ServerID: server, ToolName: tool, Arguments: args, Exposure: &p.authzen, Metadata: meta}
	id, dec := p.kernel.Admit(ctx, token, nil)
	switch {
	case dec != nil:
		// An unknown subject: no credential, or one that does not verify.
	case !namesSubject(ev.Subject.ID, id.Subject, id.Caller):
		dec = p.kernel.RefuseSubject(id, fmt.Sprintf("subject.id %q is not the subject of the credential presented", abbreviate(ev.Subject.ID)))
	}
	var res *dispatch.Result
	var err error
	if dec != nil {
		res, err = p.dispatch.Refuse(ctx, call, dec)
	} else {
		res, err = p.dispatch.Authorize(ctx, call)
	}
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return itemError(http.StatusBadRequest, err.Error()), nil
	case err != nil:
		return Decision{}, err
	}
	d := Decision{Decision: res.Decision.Allow, Context: map[string]any{"receipt_id": res.ReceiptID}}
	if !d.Decision {
		d.Context["reason_admin"] = map[string]string{"en": res.Decision.Reason}
		d.Context["guard"] = res.Decision.Guard
		if dec != nil {
			d.Context["error"] = map[string]any{"status": http.StatusUnauthorized, "message": "unknown subject: " + res.Decision.Reason}
		}
	}
	return d, nil
}

// namesSubject reports whether the PEP's subject id is the credential's:
// a capability's subject key, or an access token's sub.
func namesSubject(id, capabilitySubject string, caller *identity.Caller) bool {
	if caller != nil {
		return caller.Subject == id
	}
	return id == capabilitySubject
}

// itemError is a batch item (or single evaluation) that could not be
// decided, in AuthZEN's form: a deny with the error in its context.
func itemError(status int, msg string) Decision {
	return Decision{Decision: false, Context: map[string]any{"error": map[string]any{"status": status, "message": msg}}}
}

// readRequest decodes a JSON request body into v, answering 400 itself
// when it cannot.
func readRequest(w http.ResponseWriter, r *http.Request, v any) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, http.StatusMethodNotAllowed, "use POST")
		return false
	}
	if ct := r.Header.Get("Content-Type"); !strings.HasPrefix(strings.ToLower(strings.TrimSpace(ct)), "application/json") {
		writeError(w, http.StatusBadRequest, "Content-Type must be application/json")
		return false
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEvaluationBody))
	if err != nil {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("request body: %v (at most %d bytes)", err, maxEvaluationBody))
		return false
	}
	if err := strictjson.UnmarshalExact(raw, v); err != nil {
		writeError(w, http.StatusBadRequest, "request body: "+err.Error())
		return false
	}
	return true
}

// writeError answers an AuthZEN error: the status, with a JSON string
// saying what was wrong.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, msg)
}

func echoRequestID(w http.ResponseWriter, r *http.Request) {
	if id := r.Header.Get(requestIDHeader); id != "" {
		w.Header().Set(requestIDHeader, id)
	}
}
