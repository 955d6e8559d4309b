// Package relay is a demo agent that does its work by calling another A2A
// agent: the middle hop of a delegated call. It forwards its text to one
// downstream skill with the a2a-go client, presenting its own (delegated)
// capability, and extends the governed call chain of the call it serves:
// the downstream call names this call as its parent, keeps the chain id
// and origin, and names the caller of this call as its delegator. It never
// starts a new chain for a call that came with one.
package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	a2apb "github.com/a2aproject/a2a-go/v2/a2a"
	"github.com/a2aproject/a2a-go/v2/a2aclient"
	"github.com/google/uuid"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// Target is the downstream skill a relay calls.
type Target struct {
	// URL is the downstream agent's A2A JSON-RPC endpoint.
	URL string
	// Token is the capability the relay presents downstream, in header
	// form: its own authority, normally delegated by its callers'.
	Token string
	// ServerID and ToolName name the downstream skill: the governed
	// intent of the relayed call must name what it calls.
	ServerID, ToolName string
	// Signer, when set, proves possession of Token's subject key with a
	// DPoP proof per request (a token that can delegate needs one);
	// without it Token is sent as a bearer token.
	Signer *dpop.Signer
}

// Server is a relay tool server with one tool.
type Server struct {
	tools.Running
	serverID, toolName string
	target             Target
	http               *http.Client
}

var _ tools.Server = (*Server)(nil)

// New returns a relay serving serverID/toolName that forwards to target.
func New(serverID, toolName string, target Target) *Server {
	var rt http.RoundTripper = bearer{target.Token, http.DefaultTransport}
	if target.Signer != nil {
		rt = &dpop.Transport{Signer: target.Signer}
	}
	return &Server{serverID: serverID, toolName: toolName, target: target,
		http: &http.Client{Timeout: 30 * time.Second, Transport: rt}}
}

// Manifest returns a fresh copy on every call.
func (s *Server) Manifest() *schemas.ToolManifest {
	return &schemas.ToolManifest{
		Schema: schemas.ManifestSchema, ServerID: s.serverID, Name: "Relay agent", Version: "0.1.0",
		Description: "Relays a request to " + s.target.ServerID + "/" + s.target.ToolName + " on another agent, extending the call chain",
		Tools: []schemas.ToolDefinition{{
			Name:           s.toolName,
			Description:    "Ask another agent, on the caller's delegation",
			InputSchema:    json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
			HasSideEffects: true,
			Metadata:       map[string]json.RawMessage{"a2a.expose": json.RawMessage(`true`)},
		}},
	}
}

// ServerID returns the relay's server id.
func (s *Server) ServerID() string { return s.serverID }

// ToolNames returns the one tool.
func (s *Server) ToolNames() []string { return []string{s.toolName} }

// Invoke relays and returns {"downstream":{"taskId","state","receiptId"},"reply":<first artifact's parts>}.
func (s *Server) Invoke(ctx context.Context, inv tools.Invocation) (json.RawMessage, error) {
	var args struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(inv.Arguments, &args); err != nil {
		return nil, fmt.Errorf("relay: arguments: %w", err)
	}
	intent, err := s.nextIntent(inv.Governance)
	if err != nil {
		return nil, err
	}
	runCtx, finish, err := s.Start(ctx, inv.ID)
	if err != nil {
		return nil, fmt.Errorf("relay %s: %w", s.toolName, err)
	}
	defer finish()
	client, err := a2aclient.NewFromEndpoints(runCtx, []*a2apb.AgentInterface{a2apb.NewAgentInterface(s.target.URL, a2apb.TransportProtocolJSONRPC)},
		a2aclient.WithJSONRPCTransport(s.http))
	if err != nil {
		return nil, fmt.Errorf("relay: client for %s: %w", s.target.URL, err)
	}
	defer client.Destroy()
	var intentJSON map[string]any
	raw, _ := json.Marshal(intent)
	_ = json.Unmarshal(raw, &intentJSON)
	msg := a2apb.NewMessage(a2apb.MessageRoleUser, a2apb.NewTextPart(args.Text))
	msg.Metadata = map[string]any{"chio": map[string]any{"targetSkillId": s.target.ToolName, "governedIntent": intentJSON}}
	res, err := client.SendMessage(runCtx, &a2apb.SendMessageRequest{Message: msg})
	if err != nil {
		return nil, fmt.Errorf("relay to %s/%s: %w", s.target.ServerID, s.target.ToolName, err)
	}
	task, ok := res.(*a2apb.Task)
	if !ok {
		return nil, fmt.Errorf("relay to %s/%s: answered with %T, not a task", s.target.ServerID, s.target.ToolName, res)
	}
	receiptID := ""
	if c, ok := task.Metadata["chio"].(map[string]any); ok {
		receiptID, _ = c["receiptId"].(string)
	}
	if task.Status.State != a2apb.TaskStateCompleted {
		return nil, fmt.Errorf("relay to %s/%s: task %s ended %s (receipt %s)", s.target.ServerID, s.target.ToolName, task.ID, task.Status.State, receiptID)
	}
	var reply any
	if len(task.Artifacts) > 0 {
		reply = task.Artifacts[0].Parts
	}
	return json.Marshal(map[string]any{
		"downstream": map[string]any{"taskId": task.ID, "state": "completed", "receiptId": receiptID},
		"reply":      reply,
	})
}

// InvokeStream relays and emits the result as one chunk.
func (s *Server) InvokeStream(ctx context.Context, inv tools.Invocation, emit func(tools.Chunk) error) error {
	out, err := s.Invoke(ctx, inv)
	if err != nil {
		return err
	}
	return emit(tools.Chunk{Data: out, Last: true})
}

// nextIntent is the governed intent of the relayed call: the call this
// relay serves becomes the parent, the chain and its origin carry over,
// and the subject that called this relay is the delegator. A call that
// came without a chain starts one rooted at it.
func (s *Server) nextIntent(g *tools.Governance) (*schemas.GovernedIntent, error) {
	if g == nil || g.RequestID == "" || g.ReceiptID == "" || g.Subject == "" {
		return nil, errors.New("relay: the call carries no governance context (request, receipt, subject); refusing to relay without a chain")
	}
	next := &schemas.GovernedIntent{ID: uuid.Must(uuid.NewV7()).String(), ServerID: s.target.ServerID, ToolName: s.target.ToolName,
		Purpose: "relay for " + s.serverID + "/" + s.toolName}
	chain := &schemas.CallChain{ChainID: g.ReceiptID, ParentRequestID: g.RequestID, ParentReceiptID: g.ReceiptID,
		OriginSubject: g.Subject, DelegatorSubject: g.Subject}
	if in := g.Intent; in != nil {
		next.Purpose, next.MaxAmount = in.Purpose, in.MaxAmount
		if c := in.CallChain; c != nil {
			chain.ChainID, chain.OriginSubject = c.ChainID, c.OriginSubject
		}
	}
	next.CallChain = chain
	return next, nil
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
