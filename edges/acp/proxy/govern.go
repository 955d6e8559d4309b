package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/coder/acp-go-sdk"
	"github.com/google/uuid"

	chioacp "github.com/chio-ledger/chio/edges/acp"
	"github.com/chio-ledger/chio/edges/dispatch"
	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
	"github.com/chio-ledger/chio/schemas/strictjson"
)

// call is one governed request as the kernel sees it.
type call struct {
	sessionID string
	args      map[string]any
	// params are what the editor is sent: encoded from the same decoded
	// request the arguments come from, so the two cannot differ.
	params json.RawMessage
	// permission is the decoded session/request_permission, for its answer.
	permission acp.RequestPermissionRequest
}

// arguments decodes a governed request's params into the arguments the
// kernel, the guards and the receipt see (see the package doc).
func (s *session) arguments(method string, params json.RawMessage) (*call, error) {
	var sid struct {
		SessionID string `json:"sessionId"`
	}
	if err := strictObject(params, &sid); err != nil {
		return nil, err
	}
	if sid.SessionID == "" {
		return nil, errors.New("sessionId is required")
	}
	c := &call{sessionID: sid.SessionID, args: map[string]any{"sessionId": sid.SessionID}}
	switch method {
	case MethodRead:
		p, err := decode[acp.ReadTextFileRequest](params, c)
		if err != nil {
			return nil, err
		}
		if p.Path == "" {
			return nil, errors.New("path is required")
		}
		c.args["path"] = p.Path
		if p.Line != nil {
			c.args["line"] = *p.Line
		}
		if p.Limit != nil {
			c.args["limit"] = *p.Limit
		}
	case MethodWrite:
		p, err := decode[acp.WriteTextFileRequest](params, c)
		if err != nil {
			return nil, err
		}
		if p.Path == "" {
			return nil, errors.New("path is required")
		}
		c.args["path"] = p.Path
		c.args["contentSha256"] = schemas.SHA256Hex([]byte(p.Content))
		c.args["contentBytes"] = len(p.Content)
	case MethodTerminal:
		p, err := decode[acp.CreateTerminalRequest](params, c)
		if err != nil {
			return nil, err
		}
		if p.Command == "" {
			return nil, errors.New("command is required")
		}
		c.args["command"] = p.Command
		c.args["args"] = append([]string{}, p.Args...)
		if p.Cwd != nil {
			c.args["cwd"] = *p.Cwd
		}
		names := []string{}
		for _, e := range p.Env {
			names = append(names, e.Name)
		}
		c.args["env"] = names
		if p.OutputByteLimit != nil {
			c.args["outputByteLimit"] = *p.OutputByteLimit
		}
	case MethodOutput, MethodWait, MethodKill, MethodRelease:
		p, err := decode[acp.TerminalOutputRequest](params, c) // every one of them is {sessionId, terminalId}
		if err != nil {
			return nil, err
		}
		if p.TerminalId == "" {
			return nil, errors.New("terminalId is required")
		}
		c.args["terminalId"] = p.TerminalId
		s.mu.Lock()
		cmd, ok := s.terminals[p.TerminalId]
		s.mu.Unlock()
		if ok {
			c.args["command"] = cmd
		}
	case MethodPermission:
		p, err := decode[acp.RequestPermissionRequest](params, c)
		if err != nil {
			return nil, err
		}
		c.permission = p
		tc := map[string]any{"toolCallId": string(p.ToolCall.ToolCallId)}
		if p.ToolCall.Kind != nil {
			tc["kind"] = string(*p.ToolCall.Kind)
		}
		if p.ToolCall.Title != nil {
			tc["title"] = schemas.TruncateText(*p.ToolCall.Title)
		}
		c.args["toolCall"] = tc
		paths := []string{}
		for _, l := range p.ToolCall.Locations {
			paths = append(paths, l.Path)
		}
		c.args["paths"] = paths
		opts := []map[string]string{}
		for _, o := range p.Options {
			opts = append(opts, map[string]string{"optionId": string(o.OptionId), "kind": string(o.Kind)})
		}
		c.args["options"] = opts
	}
	return c, nil
}

// decode reads params (strictjson) as the SDK's request type T and sets
// c.params to T encoded again: what the editor is sent is what the
// arguments are built from.
func decode[T any](params json.RawMessage, c *call) (T, error) {
	var p T
	if err := strictjson.Unmarshal(params, &p); err != nil {
		return p, err
	}
	raw, err := json.Marshal(p)
	if err != nil {
		return p, err
	}
	c.params = raw
	return p, nil
}

// strictObject requires params to be a JSON object strictjson accepts (no
// member repeated, exactly or but for case, at any depth) and decodes it
// into v.
func strictObject(params json.RawMessage, v any) error {
	if len(params) == 0 || params[0] != '{' {
		return errors.New("params must be a JSON object")
	}
	return strictjson.Unmarshal(params, v)
}

// govern runs one governed request of the agent and returns its answer.
func (s *session) govern(m *message) message {
	c, err := s.arguments(m.Method, m.Params)
	if err != nil {
		return reply(m.ID, nil, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("chio: invalid %s params: %v", m.Method, err)})
	}
	args, err := json.Marshal(c.args)
	if err != nil {
		return reply(m.ID, nil, &acp.RequestError{Code: -32602, Message: fmt.Sprintf("chio: invalid %s params: %v", m.Method, err)})
	}
	proof, err := s.p.proof(m.Method, args)
	if err != nil {
		return reply(m.ID, nil, &acp.RequestError{Code: -32603, Message: fmt.Sprintf("chio: sign the proof of %s: %v", m.Method, err)})
	}
	rid := uuid.Must(uuid.NewV7()).String()
	acpMeta := map[string]any{"session_id": c.sessionID, "method": m.Method, "request_id": string(m.ID)}
	dc := dispatch.Call{ReceiptID: rid, Token: s.p.token, Proof: proof, ServerID: ServerID, ToolName: m.Method, Arguments: args,
		Metadata: map[string]any{"protocol": "acp", "acp": acpMeta}}
	if m.Method == MethodPermission {
		return s.permission(m, c, dc)
	}
	var answer *message // the editor's answer, relayed to the agent
	s.p.tools.put(rid, func(ctx context.Context) (json.RawMessage, error) {
		a, out, err := s.forward(ctx, m.ID, m.Method, c.params)
		answer = a
		return out, err
	})
	defer s.p.tools.take(rid)
	res, err := s.p.dispatch.Do(s.ctx, dc)
	if rerr := refusal(res, err); rerr != nil {
		return reply(m.ID, nil, rerr)
	}
	if answer == nil {
		return reply(m.ID, nil, cutOff(rid, res.ToolErr))
	}
	if res.ToolErr == nil {
		s.track(m.Method, c, res.Output)
	}
	return relayed(m.ID, answer, rid)
}

// track keeps the command of each terminal the editor created, for the
// arguments of the calls on it, until the terminal is released.
func (s *session) track(method string, c *call, output json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch method {
	case MethodTerminal:
		var t acp.CreateTerminalResponse
		if strictjson.Unmarshal(output, &t) == nil && t.TerminalId != "" {
			s.terminals[t.TerminalId] = c.args["command"].(string)
		}
	case MethodRelease:
		delete(s.terminals, c.args["terminalId"].(string))
	}
}

// relayed is the editor's answer under the agent's id: a result object
// with _meta.chioReceiptId added, or the editor's error (never both),
// with chioReceiptId added to its data when that is an object or absent.
func relayed(id json.RawMessage, answer *message, rid string) message {
	if e := answer.Error; e != nil {
		out := *e
		switch d := e.Data.(type) {
		case nil:
			out.Data = map[string]any{"chioReceiptId": rid}
		case map[string]any:
			nd := map[string]any{"chioReceiptId": rid}
			for k, v := range d {
				nd[k] = v
			}
			out.Data = nd
		}
		return message{ID: id, Error: &out}
	}
	return message{ID: id, Result: withReceipt(answer.Result, rid)}
}

// refusal is the error answering a call that did not run: not durable,
// bad arguments, its proof not checkable for want of the replay state (a
// server condition, to retry: CodeInternal, its receipt named), or denied
// (with its receipt).
func refusal(res *dispatch.Result, err error) *acp.RequestError {
	switch {
	case errors.Is(err, dispatch.ErrBadArguments):
		return &acp.RequestError{Code: -32602, Message: "chio: " + err.Error()}
	case err != nil:
		return &acp.RequestError{Code: chioacp.CodeNotRecorded, Message: "chio: the call could not be recorded, so it was not made: " + err.Error()}
	case res.Decision.DPoPCheck() == dpop.CheckState:
		d := res.Decision
		return &acp.RequestError{Code: chioacp.CodeInternal, Message: "chio: the proof could not be checked, so the call was not made; retry: " + d.Reason,
			Data: chioacp.Refused{Decision: chioacp.DecisionDeny, Guard: d.Guard, Reason: d.Reason, ReceiptID: res.ReceiptID, DPoPCheck: string(dpop.CheckState)}}
	case !res.Decision.Allow:
		d := res.Decision
		return &acp.RequestError{Code: chioacp.CodeDenied, Message: fmt.Sprintf("chio: denied at %s: %s", d.Guard, d.Reason),
			Data: chioacp.Refused{Decision: chioacp.DecisionDeny, Guard: d.Guard, Reason: d.Reason, ReceiptID: res.ReceiptID}}
	}
	return nil
}

// cutOff answers a call whose relay never got the editor's answer.
func cutOff(rid string, toolErr error) *acp.RequestError {
	msg := "chio: the editor's answer did not come"
	if toolErr != nil {
		msg += ": " + toolErr.Error()
	}
	return &acp.RequestError{Code: -32603, Message: msg, Data: map[string]any{"receiptId": rid}}
}

// forward sends the agent's request to the editor under an id of the
// proxy's own and waits for its answer: the answer, and the call's output
// or error (the editor's error; cancelled when the editor says so). If the
// session ends first the editor is asked to stop and the outcome is
// unknown.
func (s *session) forward(ctx context.Context, agentID json.RawMessage, method string, params json.RawMessage) (*message, json.RawMessage, error) {
	o := &outbound{agentID: agentID, answer: make(chan *message, 1)}
	s.mu.Lock()
	s.nextID++
	pid := mustJSON(fmt.Sprintf("chio-%d", s.nextID))
	s.outbound[string(pid)] = o
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.outbound, string(pid))
		s.mu.Unlock()
	}()
	raw, err := json.Marshal(message{JSONRPC: "2.0", ID: pid, Method: method, Params: params})
	if err == nil {
		err = s.editor.WriteLine(raw)
		s.wrote(s.editor, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("send to the editor: %w", err) // it never got there: failed, not unknown
	}
	select {
	case m := <-o.answer:
		if m.Error != nil {
			if m.Error.Code == -32800 {
				return m, nil, fmt.Errorf("the editor cancelled it: %w", context.Canceled)
			}
			return m, nil, fmt.Errorf("the editor refused it: %d %s", m.Error.Code, m.Error.Message)
		}
		return m, m.Result, nil
	case <-ctx.Done():
		cause := context.Cause(ctx)
		if !errors.Is(cause, errEditorGone) {
			s.write(s.editor, message{Method: methodCancelRequest, Params: mustJSON(cancelParams{RequestID: pid})})
		}
		return nil, nil, fmt.Errorf("%w: %v", tools.ErrOutcomeUnknown, cause)
	}
}

func mustJSON(v any) json.RawMessage {
	raw, err := json.Marshal(v)
	if err != nil {
		panic(err) // only fixed shapes are encoded here
	}
	return raw
}

// withReceipt is result with _meta.chioReceiptId added when it is an
// object (or empty); any other result goes as it came.
func withReceipt(result json.RawMessage, rid string) json.RawMessage {
	var obj map[string]json.RawMessage
	if len(result) == 0 || string(result) == "null" {
		obj = map[string]json.RawMessage{}
	} else if strictjson.Unmarshal(result, &obj) != nil {
		return result
	}
	meta := map[string]json.RawMessage{}
	if raw, ok := obj["_meta"]; ok && strictjson.Unmarshal(raw, &meta) != nil {
		return result
	}
	meta["chioReceiptId"] = mustJSON(rid)
	obj["_meta"] = mustJSON(meta)
	return mustJSON(obj)
}

// Who answered a permission request.
const (
	byPolicy = "policy"
	byHuman  = "human"
)

// permission answers the agent's session/request_permission: by policy
// when the capability names the tool in a root grant, else by the human
// through the editor. A denied request is answered with a reject option.
func (s *session) permission(m *message, c *call, dc dispatch.Call) message {
	req := c.permission
	by := byHuman
	if s.p.id.NamesTool(ServerID, MethodPermission) {
		by = byPolicy
	}
	dc.Metadata["acp"].(map[string]any)["permission_by"] = by
	if by == byHuman {
		// A person may take longer than the ledger's incomplete-after:
		// the decision says until when its outcome is still expected.
		dc.OutcomeWithin = s.p.approvalWait + approvalMargin
	}
	rid := dc.ReceiptID
	var answer *message
	var resp acp.RequestPermissionResponse
	s.p.tools.put(rid, func(ctx context.Context) (json.RawMessage, error) {
		if by == byPolicy {
			resp = choose(req.Options, true)
			return json.Marshal(resp)
		}
		ctx, cancel := context.WithTimeoutCause(ctx, s.p.approvalWait, errNoAnswer)
		defer cancel()
		a, out, err := s.forward(ctx, m.ID, m.Method, c.params)
		answer = a
		if err == nil && strictjson.Unmarshal(out, &resp) != nil {
			return out, fmt.Errorf("the editor's permission answer is not one: %s", schemas.TruncateText(string(out)))
		}
		return out, err
	})
	defer s.p.tools.take(rid)
	dc.OutcomeMetadata = func(res *dispatch.Result) map[string]any {
		if res.ToolErr != nil {
			return nil
		}
		return map[string]any{"permission": answered(by, req.Options, resp)}
	}
	res, err := s.p.dispatch.Do(s.ctx, dc)
	switch {
	case err != nil || res.Decision.DPoPCheck() == dpop.CheckState:
		return reply(m.ID, nil, refusal(res, err))
	case !res.Decision.Allow:
		// The protocol's answer to a refusal is a reject, not an error.
		return reply(m.ID, withMeta(choose(req.Options, false), rid, res.Decision.Reason), nil)
	case by == byPolicy:
		return reply(m.ID, withMeta(resp, rid, ""), nil)
	case answer == nil:
		return reply(m.ID, nil, cutOff(rid, res.ToolErr))
	}
	return relayed(m.ID, answer, rid)
}

// approvalMargin is the time past the approval wait a permission
// request's outcome_deadline allows for recording its answer.
const approvalMargin = time.Minute

// errNoAnswer cuts a permission request the person did not answer in time.
var errNoAnswer = errors.New("no answer from the person at the editor within the approval wait")

// choose selects the allow_once option, or a reject option (reject_once
// first); none of the kind is a cancelled outcome. The policy never picks
// allow_always: the agent would stop asking, and its later calls of the
// kind would not come back to be decided.
func choose(opts []acp.PermissionOption, allow bool) acp.RequestPermissionResponse {
	order := []acp.PermissionOptionKind{acp.PermissionOptionKindRejectOnce, acp.PermissionOptionKindRejectAlways}
	if allow {
		order = []acp.PermissionOptionKind{acp.PermissionOptionKindAllowOnce}
	}
	for _, k := range order {
		for _, o := range opts {
			if o.Kind == k {
				return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{
					Selected: &acp.RequestPermissionOutcomeSelected{OptionId: o.OptionId}}}
			}
		}
	}
	return acp.RequestPermissionResponse{Outcome: acp.RequestPermissionOutcome{Cancelled: &acp.RequestPermissionOutcomeCancelled{}}}
}

// answered is the receipt's record of a permission answer.
func answered(by string, opts []acp.PermissionOption, r acp.RequestPermissionResponse) map[string]any {
	out := map[string]any{"answered_by": by, "outcome": "cancelled"}
	if sel := r.Outcome.Selected; sel != nil {
		out["outcome"], out["option_id"] = "selected", string(sel.OptionId)
		for _, o := range opts {
			if o.OptionId == sel.OptionId {
				out["option_kind"] = string(o.Kind)
			}
		}
	}
	return out
}

// withMeta is the proxy's own permission answer, with its receipt (and
// the reason of a refusal) in _meta.
func withMeta(r acp.RequestPermissionResponse, rid, reason string) acp.RequestPermissionResponse {
	r.Meta = map[string]any{"chioReceiptId": rid}
	if reason != "" {
		r.Meta["chioReason"] = reason
	}
	return r
}

// narrowInitialize returns initialize's params with the client
// capabilities the capability can never allow turned off; every other
// field is kept as the editor sent it.
func (p *Proxy) narrowInitialize(params json.RawMessage) (json.RawMessage, error) {
	// Names are matched as encoding/json (and so a Go agent) would:
	// without case; strictjson has refused a name repeated but for case.
	object := func(raw json.RawMessage, what string) (map[string]json.RawMessage, error) {
		m := map[string]json.RawMessage{}
		if err := strictObject(raw, &m); err != nil {
			return nil, fmt.Errorf("invalid %s: %w", what, err)
		}
		return m, nil
	}
	find := func(m map[string]json.RawMessage, name string) string {
		for k := range m {
			if strings.EqualFold(k, name) {
				return k
			}
		}
		return ""
	}
	obj, err := object(params, "initialize params")
	if err != nil {
		return nil, err
	}
	caps := map[string]json.RawMessage{}
	ck := find(obj, "clientCapabilities")
	if ck != "" {
		if caps, err = object(obj[ck], "clientCapabilities"); err != nil {
			return nil, err
		}
	} else {
		ck = "clientCapabilities"
	}
	var fs map[string]json.RawMessage
	fk := find(caps, "fs")
	if fk != "" {
		if fs, err = object(caps[fk], "clientCapabilities.fs"); err != nil {
			return nil, err
		}
	}
	narrow := func(m map[string]json.RawMessage, name, method string) {
		if k := find(m, name); k != "" && string(m[k]) != "false" && !p.mayEver(method) {
			m[k] = json.RawMessage("false")
		}
	}
	narrow(fs, "readTextFile", MethodRead)
	narrow(fs, "writeTextFile", MethodWrite)
	narrow(caps, "terminal", MethodTerminal)
	// Elicitation (a form or a URL the agent shows the human) is not
	// relayed: it could collect secrets or send the human anywhere
	// without a record.
	if k := find(caps, "elicitation"); k != "" {
		delete(caps, k)
	}
	if fk != "" {
		caps[fk] = mustJSON(fs)
	}
	obj[ck] = mustJSON(caps)
	return json.Marshal(obj)
}

// mayEver reports whether the capability grants the method at all
// (guards may still deny a call).
func (p *Proxy) mayEver(method string) bool {
	e, ok := p.registry.Tool(ServerID, method)
	return ok && p.id.Invokes(e)
}
