package tools

import (
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/schemas"
)

// FidelityKind rates how honestly a protocol can carry a tool.
type FidelityKind string

// Fidelity levels: how faithfully a bridged protocol can carry a tool.
const (
	// FidelityLossless: maps to the protocol's native primitives; no caveats.
	FidelityLossless FidelityKind = "lossless"
	// FidelityAdapted: publishable only with the caveats surfaced in discovery.
	FidelityAdapted FidelityKind = "adapted"
	// FidelityUnsupported: the protocol cannot carry it honestly; never published.
	FidelityUnsupported FidelityKind = "unsupported"
)

// Fidelity is a tool's rating on one surface, in the bridgeFidelity JSON
// shape: {"kind":"lossless"}, {"kind":"adapted","caveats":[...]} or
// {"kind":"unsupported","reason":"..."}.
type Fidelity struct {
	Kind    FidelityKind `json:"kind"`
	Caveats []string     `json:"caveats,omitempty"`
	Reason  string       `json:"reason,omitempty"`
}

// Publishable reports whether an edge may list the tool in discovery; an
// unknown or empty kind is not publishable.
func (f Fidelity) Publishable() bool {
	return f.Kind == FidelityLossless || f.Kind == FidelityAdapted
}

func unsupported(reason string) Fidelity { return Fidelity{Kind: FidelityUnsupported, Reason: reason} }

func withCaveats(caveats []string) Fidelity {
	if len(caveats) == 0 {
		return Fidelity{Kind: FidelityLossless}
	}
	return Fidelity{Kind: FidelityAdapted, Caveats: caveats}
}

// Reasons shared by the A2A and ACP ratings.
const (
	reasonUnpublished = "publication disabled by x-chio-publish=false"
	reasonBadHints    = "bridge hints cannot be read, so the tool's semantics are unknown: "
)

// A2A caveats. The stdio ones are the texts of Chio's hello-a2a agent
// card, kept verbatim so clients matching on them keep working; the HTTP
// ones say what the HTTP edge does instead.
const (
	a2aCaveatSideEffects = "the tool has side effects, which an A2A skill cannot declare: a call may change external state, and a retried request may repeat the effect"
	a2aCaveatDeferred    = "stream-capable tools execute through 'message/stream' deferred tasks; output is surfaced on follow-up 'task/get' rather than incremental transport updates"
	a2aCaveatCollated    = "stream chunks are collated into the terminal task payload instead of pushed as incremental A2A events"
	a2aCaveatPartial     = "partial output is preserved only in the terminal task payload, not incremental updates"
	a2aCaveatCancelTask  = "cancellation goes through 'task/cancel' and is best-effort: a call that completes before the cancel lands keeps its result and receipt"
	// a2aCaveatStreamSSE takes the list of streaming transports.
	a2aCaveatStreamSSE  = "stream output is delivered incrementally: SendStreamingMessage ('message/stream' in 0.3) and SubscribeToTask ('tasks/resubscribe') push each chunk as an artifact update as the tool produces it, %s; a blocking SendMessage ('message/send') answers once the call ends, with every chunk in the task's artifacts"
	a2aCaveatPartialSSE = "partial output arrives as artifact updates (append, lastChunk) while the call runs; chunks already delivered stay in the task's artifacts if the call then fails or is canceled"
	a2aCaveatCancelSSE  = "cancellation goes through A2A task cancellation (CancelTask, 'tasks/cancel' in 0.3) and is best-effort: a call that completes before the cancel lands keeps its result and receipt, and the cancel is refused as not cancelable"
	a2aReasonApproval   = "requires interactive approval semantics that the current A2A edge cannot truthfully project"
)

// A2AProfile is the shape of the A2A edge a rating is for. The zero value
// is the HTTP edge serving JSON-RPC and HTTP+JSON.
type A2AProfile struct {
	// Stdio is the hello-a2a stdio profile: 'message/stream' creates a
	// deferred task whose output is collated and returned by a follow-up
	// 'task/get', so streaming and partial output carry Chio's
	// caveats. False is the HTTP edge, which streams artifact updates over
	// SSE.
	Stdio bool
	// GRPC says the HTTP edge also serves the gRPC binding, which streams
	// the same updates over gRPC server streaming.
	GRPC bool
}

func (p A2AProfile) streamTransports() string {
	if p.GRPC {
		return "over SSE on the JSON-RPC and HTTP+JSON bindings and over gRPC server streaming"
	}
	return "over SSE on the JSON-RPC and HTTP+JSON bindings"
}

// A2AFidelity rates t on the A2A edge: unsupported when it is unpublished,
// needs approval or its hints cannot be read (fail closed); adapted with a
// caveat per side effect, streaming, partial output and cancellation
// semantic, each saying what the profile does with it (the stdio profile
// defers and collates, the HTTP edge streams); lossless otherwise.
// Publishability never depends on the profile.
func A2AFidelity(t *schemas.ToolDefinition, p A2AProfile) Fidelity {
	h, err := ReadHints(t)
	switch {
	case err != nil:
		return unsupported(reasonBadHints + err.Error())
	case !h.Publish:
		return unsupported(reasonUnpublished)
	case h.ApprovalRequired:
		return unsupported(a2aReasonApproval)
	}
	var caveats []string
	if h.SideEffects {
		caveats = append(caveats, a2aCaveatSideEffects)
	}
	if h.Streaming {
		if p.Stdio {
			caveats = append(caveats, a2aCaveatDeferred, a2aCaveatCollated)
		} else {
			caveats = append(caveats, fmt.Sprintf(a2aCaveatStreamSSE, p.streamTransports()))
		}
	}
	if h.PartialOutput {
		if p.Stdio {
			caveats = append(caveats, a2aCaveatPartial)
		} else {
			caveats = append(caveats, a2aCaveatPartialSSE)
		}
	}
	if h.Cancellation {
		if p.Stdio {
			caveats = append(caveats, a2aCaveatCancelTask)
		} else {
			caveats = append(caveats, a2aCaveatCancelSSE)
		}
	}
	return withCaveats(caveats)
}

// ACPCategory is the ACP tool category a capability is projected as.
type ACPCategory string

// ACP categories.
const (
	ACPFilesystem ACPCategory = "filesystem"
	ACPTerminal   ACPCategory = "terminal"
	ACPBrowser    ACPCategory = "browser"
	ACPTool       ACPCategory = "tool"
)

// ACP caveats and reasons.
const (
	acpCaveatPermission = "side-effecting capability: it requires permission through 'session/request_permission', which the edge denies by default unless a Chio capability grants the call"
	acpCaveatCollected  = "stream output is collected: 'tool/stream' creates a deferred task and its chunks are returned together by 'tool/resume', not pushed incrementally"
	acpCaveatPartial    = "partial output is preserved only in the resumed terminal payload, not incremental updates"
	acpCaveatCancel     = "cancellation goes through 'tool/cancel', which cancels a deferred task only before 'tool/resume' executes it"
	acpCaveatGeneric    = "no native ACP category matches; projected as a generic 'tool' without filesystem or terminal semantics"
	acpReasonApproval   = "requires interactive approval semantics that the current ACP edge cannot truthfully project"
	acpReasonBrowser    = "browser capabilities are auto-suppressed: the ACP edge cannot project browser semantics honestly"
	acpReasonMutating   = "generic mutating tool: ACP's generic 'tool' category has no native preview of its side effects, so a permission request could not show what the call would change"
	acpReasonCategory   = "default ACP category is not filesystem, terminal, browser or tool"
)

// InferACPCategory infers a category from a tool name with Chio's
// keyword rules, in its order; with no match it returns fallback ("tool" when
// empty). Matching ignores case, so "ExecCommand" is a terminal and
// "Browser_Click" a browser tool (which then stays suppressed).
func InferACPCategory(name string, fallback ACPCategory) ACPCategory {
	n := strings.ToLower(name)
	containsAny := func(words ...string) bool {
		for _, w := range words {
			if strings.Contains(n, w) {
				return true
			}
		}
		return false
	}
	switch {
	case containsAny("read_file", "write_file", "list_dir") || strings.HasPrefix(n, "fs_"):
		return ACPFilesystem
	case containsAny("terminal", "exec", "shell", "command"):
		return ACPTerminal
	case containsAny("browser", "navigate", "screenshot"):
		return ACPBrowser
	case fallback == "":
		return ACPTool
	}
	return fallback
}

// ACPFidelity infers t's ACP category (defaultCategory when no keyword
// matches, "tool" when that is empty) and rates it: unsupported when hints
// cannot be read, it is unpublished, needs approval, is a browser tool or a
// generic tool with side effects; lossless for a filesystem or terminal tool
// without caveats; adapted otherwise.
func ACPFidelity(t *schemas.ToolDefinition, defaultCategory ACPCategory) (ACPCategory, Fidelity) {
	h, err := ReadHints(t)
	if err != nil {
		// t may be nil here; the category is still inferred when it can be.
		cat := ACPTool
		if t != nil {
			cat = InferACPCategory(t.Name, defaultCategory)
		}
		return cat, unsupported(reasonBadHints + err.Error())
	}
	cat := InferACPCategory(t.Name, defaultCategory)
	switch {
	case cat != ACPFilesystem && cat != ACPTerminal && cat != ACPBrowser && cat != ACPTool:
		return cat, unsupported(acpReasonCategory)
	case !h.Publish:
		return cat, unsupported(reasonUnpublished)
	case h.ApprovalRequired:
		return cat, unsupported(acpReasonApproval)
	case cat == ACPBrowser:
		return cat, unsupported(acpReasonBrowser)
	case cat == ACPTool && h.SideEffects:
		return cat, unsupported(acpReasonMutating)
	}
	var caveats []string
	if h.SideEffects {
		caveats = append(caveats, acpCaveatPermission)
	}
	if h.Streaming {
		caveats = append(caveats, acpCaveatCollected)
	}
	if h.PartialOutput {
		caveats = append(caveats, acpCaveatPartial)
	}
	if h.Cancellation {
		caveats = append(caveats, acpCaveatCancel)
	}
	if cat == ACPTool {
		caveats = append(caveats, acpCaveatGeneric)
	}
	return cat, withCaveats(caveats)
}
