package kernel

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// StepDPoP is the validation step of proof of possession: after
// revocation, before the guards (the seed's order). Its deny reasons start
// with "dpop <check>:" naming the check that failed (dpop.Check).
const StepDPoP = "dpop"

// Proof is the proof of possession one request presented with its token:
// an RFC 9449 proof for the HTTP request Method URL, or a chio.dpop_proof.v1
// bound to the tool call. One Proof is one request: however often the
// request consults the kernel (Identify, then Decide), the proof is
// verified once and its one-time id claimed once. A nil *Proof is a
// bearer presentation.
type Proof struct {
	// DPoP is the compact JWS of the DPoP header (or gRPC metadata).
	DPoP string
	// Method and URL are the request as the server received it.
	Method, URL string
	// Tool is a chio.dpop_proof.v1, for a call without an HTTP request
	// of its own (stdio, ACP, MCP _meta).
	Tool json.RawMessage

	mu      sync.Mutex
	checked bool
	err     error // the stateless checks' result, once checked
	binding Binding
	tool    *dpop.ToolProof
	claim   *dpopreplay.Pending
}

// FromPresented is the Proof of an HTTP request's credential, nil when it
// carried none.
func FromPresented(p dpop.Presented) *Proof {
	if p.Proof == "" {
		return nil
	}
	return &Proof{DPoP: p.Proof, Method: p.Method, URL: p.URL}
}

// Binding is how a caller proved who it is, as its receipt records it.
type Binding struct {
	// Method is dpop.MethodBearer, MethodDPoP or MethodToolProof.
	Method string
	// Thumbprint is the proving key's RFC 7638 thumbprint (jkt).
	Thumbprint string
}

// record is the binding's form in metadata.attribution.binding.
func (b Binding) record() map[string]any {
	if b.Method == "" {
		return nil
	}
	m := map[string]any{"method": b.Method}
	if b.Thumbprint != "" {
		m["jkt"] = b.Thumbprint
	}
	return m
}

// needsProof reports whether tok is honoured only with a proof: it can
// delegate, a grant asks for one, or the operator requires proofs of
// every token. A token that can delegate is the ancestor of every token
// it hands out, and each of those carries it in its chain; honoured by
// possession alone, it would be honoured for whoever holds a child.
func (k *Kernel) needsProof(tok *schemas.CapabilityToken) string {
	if k.cfg.requireDPoP {
		return "this server requires a proof of possession with every capability"
	}
	for i, g := range tok.Scope.Grants {
		if slices.Contains(g.Operations, schemas.OpDelegate) {
			return fmt.Sprintf("capability %s can delegate (grant %d)", tok.ID, i)
		}
		if g.DPoPRequired != nil && *g.DPoPRequired {
			return fmt.Sprintf("grant %d of capability %s has dpop_required", i, tok.ID)
		}
	}
	return ""
}

// checkProof is the proof step for token text whose token verified as v:
// it verifies the proof (once per request) and starts its one-time claim.
// call, when set, is the tool call a tool proof must name. It returns the
// binding or a *dpop.Error.
func (k *Kernel) checkProof(ctx context.Context, text string, v *verified, p *Proof, call *dpop.Call) (Binding, error) {
	if p == nil {
		if why := k.needsProof(v.tok); why != "" {
			return Binding{}, &dpop.Error{Check: dpop.CheckMissing, Msg: why + ", so it is honoured only with a proof of possession of its subject key: " +
				"send it as Authorization: DPoP <token> with a DPoP proof header (or a chio.dpop_proof.v1 where the transport has no HTTP request)"}
		}
		return Binding{Method: dpop.MethodBearer}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.checked {
		p.checked = true
		p.binding, p.tool, p.err = k.verifyProof(text, v, p)
		if p.err == nil {
			if k.replay == nil {
				p.err = &dpop.Error{Check: dpop.CheckState, Msg: "this kernel has no replay state (fail closed)"}
			} else {
				key := ""
				if p.tool != nil {
					key = p.tool.ReplayKey()
				} else {
					pr, _ := dpop.Parse(p.DPoP) // parsed once already; cheap next to a KV round
					key = pr.ReplayKey()
				}
				p.claim = k.replay.Start(ctx, key)
			}
		}
	}
	if p.err != nil {
		return Binding{}, p.err
	}
	if p.tool != nil && call != nil {
		c := *call
		c.Subject, c.CapabilityID = v.tok.Subject, v.tok.ID
		c.Now, c.Lifetime, c.Skew = k.cfg.now(), k.cfg.proofLifetime, k.cfg.proofSkew
		if err := p.tool.VerifyCall(c); err != nil {
			return Binding{}, err
		}
	}
	return p.binding, nil
}

// verifyProof runs a proof's stateless checks against the token.
func (k *Kernel) verifyProof(text string, v *verified, p *Proof) (Binding, *dpop.ToolProof, error) {
	switch {
	case p.DPoP != "" && len(p.Tool) > 0:
		return Binding{}, nil, &dpop.Error{Check: dpop.CheckMalformed, Msg: "a request carries one proof, not both forms"}
	case len(p.Tool) > 0:
		tp, err := dpop.ParseToolProof(p.Tool)
		if err != nil {
			return Binding{}, nil, err
		}
		// The call itself is checked per Decide; here what holds for any
		// call: the key, the capability, the time.
		if tp.AgentKey != v.tok.Subject {
			return Binding{}, nil, &dpop.Error{Check: dpop.CheckKey, Msg: "agent_key is not the token's subject"}
		}
		if tp.CapabilityID != v.tok.ID {
			return Binding{}, nil, &dpop.Error{Check: dpop.CheckCall, Msg: "the proof names another capability"}
		}
		if err := tp.Fresh(k.cfg.now(), k.cfg.proofLifetime, k.cfg.proofSkew); err != nil {
			return Binding{}, nil, err
		}
		return Binding{Method: dpop.MethodToolProof, Thumbprint: tp.Thumbprint()}, tp, nil
	case p.DPoP != "":
		pr, err := dpop.Parse(p.DPoP)
		if err != nil {
			return Binding{}, nil, err
		}
		if err := pr.Verify(dpop.Expect{Subject: v.tok.Subject, Token: text, Method: p.Method, URL: p.URL,
			Now: k.cfg.now(), Lifetime: k.cfg.proofLifetime, Skew: k.cfg.proofSkew}); err != nil {
			return Binding{}, nil, err
		}
		return Binding{Method: dpop.MethodDPoP, Thumbprint: pr.Thumbprint}, nil, nil
	}
	return Binding{}, nil, &dpop.Error{Check: dpop.CheckMalformed, Msg: "empty proof"}
}

// settle waits for the proof's one-time claim: nil once this request owns
// it, a *dpop.Error if it was used before or the state cannot answer.
func (p *Proof) settle(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	claim, err := p.claim, p.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if claim == nil {
		return nil // never checked: nothing was accepted
	}
	return claim.Wait(ctx)
}

// SettleProof waits for the one-time claim of the proof this decision
// accepted, if any. The dispatcher runs it beside the decision event's
// write, so a proof adds no round of its own: the tool runs only once
// both are done, and a replayed proof is refused before it. nil for a
// bearer call.
func (d *Decision) SettleProof(ctx context.Context) error { return d.proof.settle(ctx) }

// ProofRefusal is the deny decision that replaces an allow whose proof
// SettleProof refused.
func (d *Decision) ProofRefusal(err error) *Decision {
	r := *d
	r.Allow, r.Guard, r.Reason, r.Charged = false, StepDPoP, schemas.TruncateText(err.Error()), nil
	r.Evidence = append(slices.Clone(d.Evidence), schemas.GuardEvidence{GuardName: StepDPoP, Verdict: false, Details: r.Reason})
	r.proof = nil
	return &r
}

// DPoPCheck is the failed check of a deny by StepDPoP ("" otherwise):
// edges answer it with their protocol's proof challenge.
func (d *Decision) DPoPCheck() dpop.Check {
	if d == nil || d.Allow || d.Guard != StepDPoP {
		return ""
	}
	return dpop.CheckOf(d.Reason)
}
