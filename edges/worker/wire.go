package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chio-ledger/chio/edges/tools"
	"github.com/chio-ledger/chio/schemas"
)

// ServiceName is the micro service every worker registers.
const ServiceName = "chio-tools"

// serviceVersion is the wire version of the requests and answers below.
const serviceVersion = "1.0.0"

// Endpoint metadata keys.
const (
	metaServerID = "chio.server_id"
	metaManifest = "chio.manifest_sha256"
	metaRole     = "chio.role"
)

// Endpoint roles (metaRole) and the last token of their subjects.
const (
	roleInvoke   = "invoke"
	roleManifest = "manifest"
	roleCancel   = "cancel"
)

// Error codes of a worker's answer (micro's Nats-Service-Error-Code).
const (
	codeBadRequest       = "400" // the request could not be read: nothing ran
	codeUnknownTool      = "404" // no such server or tool here: nothing ran
	codeManifestMismatch = "409" // this replica serves another manifest: nothing ran
	codeCancelled        = "499" // the tool stopped on a cancellation
	codeFailed           = "500" // the tool ran and failed
	codeOutcomeUnknown   = "504" // the tool was cut off (tools.ErrOutcomeUnknown)
	codeStopping         = "503" // this replica is stopping: nothing ran
	codeTooLarge         = "413" // the tool ran; its answer does not fit a NATS message
	codeUnauthenticated  = "401" // no certified edge signed the call, or it was sent before: nothing ran
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrNoWorker: no worker serves the tool's server; the call was not
	// delivered, so nothing ran.
	ErrNoWorker = errors.New("no worker serves the tool server")
	// ErrRemoteTool: the tool ran on a worker and failed; the error
	// carries the worker's text.
	ErrRemoteTool = errors.New("the tool failed on its worker")
	// ErrRefused: a worker refused the call without running it (unknown
	// tool, another manifest, an unreadable request).
	ErrRefused = errors.New("the worker refused the call")
	// ErrBadAnswer: a worker's answer is too large or not the expected
	// JSON; the tool may have run.
	ErrBadAnswer = errors.New("the worker's answer is not usable")
	// ErrForgedAnswer: the answer is not signed by the worker key the
	// edge pins: whoever sent it is not the worker, and whether the tool
	// ran is unknown (the error also matches tools.ErrOutcomeUnknown).
	ErrForgedAnswer = errors.New("the answer is not signed by the worker key")
)

// HeaderWorkerSignature carries a worker's answer's signature by its
// manifest key (Ed25519, base64url without padding) over
// answerSigningInput: an edge takes an answer, result or refusal, only
// from the worker it pinned, so a client that joined the queue group with
// a worker's NATS credential cannot answer for it.
const HeaderWorkerSignature = "Chio-Worker-Signature"

// answerSigningInput is what a worker signs of an answer: a domain tag,
// the invoke subject, the SHA-256 of the request it answers (so an answer
// cannot be moved to another call), the error code and text (empty on
// success) and the SHA-256 of the body.
func answerSigningInput(subject string, request []byte, code, text string, body []byte) []byte {
	rq, b := sha256.Sum256(request), sha256.Sum256(body)
	return fmt.Appendf(nil, "chio.tool_answer.v1\n%s\n%x\n%s\n%s\n%x", subject, rq, code, text, b)
}

// SubjectKey is the subject token of a server id: the first 16 bytes of
// its SHA-256, in hex.
func SubjectKey(serverID string) string {
	sum := sha256.Sum256([]byte(serverID))
	return hex.EncodeToString(sum[:16])
}

// subject is the subject of a server's endpoint with the given role.
func subject(serverID, role string) string {
	return "chio.tools." + SubjectKey(serverID) + "." + role
}

// ManifestHash is the hex SHA-256 of the manifest's canonical JSON: the
// manifest_hash a registry gives it (schemas.SignManifest) and receipts
// name, so edge, worker and receipt agree on which manifest ran.
func ManifestHash(m *schemas.ToolManifest) (string, error) {
	raw, err := schemas.Canonical(m)
	if err != nil {
		return "", fmt.Errorf("manifest hash of %q: %w", m.ServerID, err)
	}
	return schemas.SHA256Hex(raw), nil
}

// request is an invoke request.
type request struct {
	ID             string          `json:"id"`
	ServerID       string          `json:"server_id"`
	Tool           string          `json:"tool"`
	Arguments      json.RawMessage `json:"arguments,omitempty"`
	Stream         bool            `json:"stream,omitempty"`
	ManifestSHA256 string          `json:"manifest_sha256"`
	Governance     *governance     `json:"governance,omitempty"`
}

// governance is tools.Governance on the wire.
type governance struct {
	RequestID string                  `json:"request_id,omitempty"`
	ReceiptID string                  `json:"receipt_id,omitempty"`
	Subject   string                  `json:"subject,omitempty"`
	Intent    *schemas.GovernedIntent `json:"intent,omitempty"`
}

func governanceOf(g *tools.Governance) *governance {
	if g == nil {
		return nil
	}
	return &governance{RequestID: g.RequestID, ReceiptID: g.ReceiptID, Subject: g.Subject, Intent: g.Intent}
}

func (g *governance) tools() *tools.Governance {
	if g == nil {
		return nil
	}
	return &tools.Governance{RequestID: g.RequestID, ReceiptID: g.ReceiptID, Subject: g.Subject, Intent: g.Intent}
}

// answer is a successful invoke's answer: Output for Invoke, Chunks for
// a streamed call (gathered on the worker and relayed in order).
type answer struct {
	Output json.RawMessage `json:"output,omitempty"`
	Chunks []chunk         `json:"chunks,omitempty"`
}

type chunk struct {
	Data json.RawMessage `json:"data"`
	Last bool            `json:"last,omitempty"`
}

// cancelRequest asks every replica to stop an invocation.
type cancelRequest struct {
	ID string `json:"id"`
}

// headerText makes s fit a NATS header value: one line, bounded.
func headerText(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if r := []rune(s); len(r) > 1024 {
		s = string(r[:1023]) + "…"
	}
	if strings.TrimSpace(s) == "" {
		s = "(no text)"
	}
	return s
}
