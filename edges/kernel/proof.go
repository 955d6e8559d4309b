package kernel

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/chio-ledger/chio/internal/dpopreplay"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

// StepDPoP is the validation step of proof of possession: after
// revocation, before the guards (Chio's order). Its deny reasons start
// with "dpop <check>:" naming the check that failed (dpop.Check).
const StepDPoP = "dpop"

// Proof is the proof of possession one request presented with its token:
// an RFC 9449 proof for the HTTP request Method URL, or a chio.dpop_proof.v1
// bound to the tool call. One Proof is one request and one token: however
// often the request consults the kernel (Identify, then Decide), the proof
// is verified once and its one-time id claimed once, and it is never good
// for another token. A nil *Proof is a bearer presentation.
type Proof struct {
	// DPoP is the compact JWS of the DPoP header (or gRPC metadata).
	DPoP string
	// Method and URL are the request as the server received it.
	Method, URL string
	// Tool is a chio.dpop_proof.v1, for a call without an HTTP request
	// of its own (stdio, ACP, MCP _meta).
	Tool json.RawMessage
	// Request, for a request that runs no tool of its own (get, cancel,
	// stream, a permission answer) but presents a Tool proof, is the
	// operation that proof must name: the edge's server id, the method as
	// the tool name, and its params. Without it, Identify and Admit check
	// a tool proof's key, capability and time, and Decide its call.
	Request *dpop.Call

	mu        sync.Mutex
	checked   bool
	preset    error  // a presentation refused before any check (FromPresented)
	token     string // the token text the proof was checked for
	err       error  // the stateless checks' result, once checked
	binding   Binding
	tool      *dpop.ToolProof
	replayKey string
	issuedAt  time.Time
	claim     *dpopreplay.Pending
	// startClaim starts a tool proof's one-time claim, once it has matched
	// the call it names (or at settle, for a request that runs no tool):
	// a proof refused for another call, or for a tool that does not
	// resolve, is not spent, so whoever sees a proof cannot void it.
	startClaim func()
}

// FromPresented is the Proof of an HTTP request's credential, nil when it
// carried none. A presentation dpop.FromRequest found wrong in form (a DPoP
// scheme without its proof, two proofs, a proof beside a bearer token) is
// a Proof that fails with that check, so the call is refused by the kernel
// with its deny receipt like any other refused proof.
func FromPresented(p dpop.Presented) *Proof {
	if p.Invalid != nil {
		return &Proof{Method: p.Method, URL: p.URL, preset: p.Invalid}
	}
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

// needsProof says why tok is honoured only with a proof ("" when it may
// be a bearer token): schemas.CapabilityToken.HolderProofReason, or the
// operator requires proofs of every token.
func (k *Kernel) needsProof(v *verified) string {
	if v.caller != nil && v.caller.Thumbprint != "" {
		return "the access token is bound to a key (cnf.jkt, RFC 9449)"
	}
	if k.cfg.requireDPoP {
		return "this server requires a proof of possession with every capability"
	}
	return v.tok.HolderProofReason()
}

// checkProof is the proof step for token text whose token verified as v:
// it verifies the proof (once per request) and starts its one-time claim.
// call, when set, is the tool call a tool proof must name. It returns the
// binding or a *dpop.Error.
func (k *Kernel) checkProof(ctx context.Context, text string, v *verified, p *Proof, call *dpop.Call) (Binding, error) {
	if p == nil {
		if why := k.needsProof(v); why != "" {
			if v.caller != nil && v.caller.Thumbprint == "" {
				return Binding{}, &dpop.Error{Check: dpop.CheckMissing, Msg: why + ", and a bearer access token proves no key: present an access token bound to your DPoP key (cnf.jkt) with a DPoP proof"}
			}
			return Binding{}, &dpop.Error{Check: dpop.CheckMissing, Msg: why + ", so it is honoured only with a proof of possession of its subject key: " +
				"send it as Authorization: DPoP <token> with a DPoP proof header (or a chio.dpop_proof.v1 where the transport has no HTTP request)"}
		}
		return Binding{Method: dpop.MethodBearer}, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.preset != nil {
		return Binding{}, p.preset
	}
	if !p.checked {
		p.checked, p.token = true, text
		p.binding, p.tool, p.replayKey, p.issuedAt, p.err = k.verifyProof(text, v, p)
		if p.err == nil {
			if k.replay == nil {
				p.err = &dpop.Error{Check: dpop.CheckState, Msg: "this kernel has no replay state (fail closed)"}
			} else {
				start := func() { p.claim, p.startClaim = k.replay.Start(ctx, p.replayKey, p.issuedAt), nil }
				if p.tool == nil {
					start() // an HTTP proof is bound to its request already
				} else {
					p.startClaim = start
				}
			}
		}
	} else if p.token != text {
		// One request, one token: a proof checked for one token is
		// never good for another, whatever the edge passes.
		return Binding{}, &dpop.Error{Check: dpop.CheckToken, Msg: "the proof was checked for another token of this request"}
	}
	if p.err != nil {
		return Binding{}, p.err
	}
	if p.tool != nil {
		if call == nil {
			call = p.Request
		}
		if call != nil {
			c := *call
			c.Subject, c.CapabilityID = v.tok.Subject, v.tok.ID
			c.Now, c.Lifetime, c.Skew = k.cfg.now(), k.cfg.proofLifetime, k.cfg.proofSkew
			if err := p.tool.VerifyCall(c); err != nil {
				return Binding{}, err
			}
			if p.startClaim != nil {
				p.startClaim()
			}
		}
	}
	return p.binding, nil
}

// verifyProof runs a proof's stateless checks against the token; it
// returns the binding, the tool proof (if that is the form), the proof's
// one-time key and when it was issued.
func (k *Kernel) verifyProof(text string, v *verified, p *Proof) (Binding, *dpop.ToolProof, string, time.Time, error) {
	switch {
	case p.DPoP != "" && len(p.Tool) > 0:
		return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckMalformed, Msg: "a request carries one proof, not both forms"}
	case v.caller != nil && len(p.Tool) > 0:
		return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckMalformed, Msg: "a tool-call proof is for a capability; an access token is proven with an RFC 9449 DPoP proof"}
	case v.caller != nil && v.caller.Thumbprint == "":
		return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckKey, Msg: "the access token is not bound to a key (no cnf.jkt): a proof cannot be checked against it"}
	case len(p.Tool) > 0:
		tp, err := dpop.ParseToolProof(p.Tool)
		if err != nil {
			return Binding{}, nil, "", time.Time{}, err
		}
		// The call itself is checked where it is known (Decide, or
		// Request); here what holds for any call: key, capability, time.
		if tp.AgentKey != v.tok.Subject {
			return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckKey, Msg: "agent_key is not the token's subject"}
		}
		if tp.CapabilityID != v.tok.ID {
			return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckCall, Msg: "the proof names another capability"}
		}
		if err := tp.Fresh(k.cfg.now(), k.cfg.proofLifetime, k.cfg.proofSkew); err != nil {
			return Binding{}, nil, "", time.Time{}, err
		}
		return Binding{Method: dpop.MethodToolProof, Thumbprint: tp.Thumbprint()}, tp, tp.ReplayKey(), time.Unix(int64(tp.IssuedAt), 0), nil
	case p.DPoP != "":
		pr, err := dpop.Parse(p.DPoP)
		if err != nil {
			return Binding{}, nil, "", time.Time{}, err
		}
		e := dpop.Expect{Subject: v.tok.Subject, Token: text, Method: p.Method, URL: p.URL,
			Now: k.cfg.now(), Lifetime: k.cfg.proofLifetime, Skew: k.cfg.proofSkew}
		if v.caller != nil {
			e.Subject, e.Thumbprint = "", v.caller.Thumbprint
		}
		if err := pr.Verify(e); err != nil {
			return Binding{}, nil, "", time.Time{}, err
		}
		return Binding{Method: dpop.MethodDPoP, Thumbprint: pr.Thumbprint}, nil, pr.ReplayKey(), time.Unix(pr.IAT, 0), nil
	}
	return Binding{}, nil, "", time.Time{}, &dpop.Error{Check: dpop.CheckMalformed, Msg: "empty proof"}
}

// settle waits for the proof's one-time claim: nil once this request owns
// it, a *dpop.Error if it was used before or the state cannot answer.
func (p *Proof) settle(ctx context.Context) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	if p.err == nil && p.preset == nil && p.startClaim != nil {
		p.startClaim() // accepted for a request that names no call: spent now
	}
	claim, err := p.claim, p.err
	if p.preset != nil {
		err = p.preset
	}
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if claim == nil {
		return nil // never checked: nothing was accepted
	}
	return claim.Wait(ctx)
}

// HasProof reports whether the decision accepted a proof whose one-time
// claim SettleProof must settle.
func (d *Decision) HasProof() bool { return d.proof != nil }

// SettleProof waits for the one-time claim of the proof this decision
// accepted, if any. The dispatcher runs it beside an allowed call's
// decision write, so a proof adds no round of its own: the tool runs only
// once both are done, and a spent proof is refused before it (RefuseProof).
// nil for a bearer call.
func (d *Decision) SettleProof(ctx context.Context) error { return d.proof.settle(ctx) }

// RefuseProof is the deny that replaces d, whose proof SettleProof
// refused: what d charged against budgets is given back (a replayed proof
// must not spend its holder's budget), and no binding is recorded (no
// caller was bound).
func (k *Kernel) RefuseProof(ctx context.Context, d *Decision, err error) *Decision {
	if len(d.charges) > 0 {
		k.budgets.refundAll(context.WithoutCancel(ctx), d.charges, d.cost, k.cfg.log)
	}
	r := *d
	r.Allow, r.Guard, r.Reason, r.Charged = false, StepDPoP, schemas.TruncateText(err.Error()), nil
	r.Evidence = append(slices.Clone(d.Evidence), schemas.GuardEvidence{GuardName: StepDPoP, Verdict: false, Details: r.Reason})
	r.Binding, r.proof, r.charges, r.cost = Binding{}, nil, nil, 0
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
