package schemas

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// Headers of a task commit. The summary is the task's state after the
// commit; a signed commit also carries its edge's credential and
// signature (HeaderEdgeCredential, HeaderEdgeSignature), the hash of its
// body and the sequence of the commit it follows on its subject.
const (
	HeaderTaskSummary = "Chio-Task-Summary"
	// HeaderTaskBodySHA256 is the hex SHA-256 of the commit's body:
	// readers of the headers alone (a task list) check the signature
	// without the body; readers of the body check it is the one signed.
	HeaderTaskBodySHA256 = "Chio-Task-Body-Sha256"
	// HeaderTaskPrev is the stream sequence of the commit this one was
	// written to follow on its subject (0: the task's first), which the
	// stream enforced (expected last subject sequence) when it stored it.
	HeaderTaskPrev = "Chio-Task-Prev"
)

// TaskCommitSigningInput is what an edge signs of a task commit: a domain
// tag, the subject, the previous sequence, the body's hash and the
// summary. Binding the previous sequence lets a reader that knows it
// refuse a genuine commit replayed later onto the same task.
func TaskCommitSigningInput(subject string, prev uint64, bodySHA256, summary string) []byte {
	return fmt.Appendf(nil, "chio.task_commit.v1\n%s\n%d\n%s\n%s", subject, prev, bodySHA256, summary)
}

// SignTaskCommit sets the signature headers of a task commit on subject
// with body, following sequence prev; h already holds its summary.
func (s *EdgeSigner) SignTaskCommit(subject string, h nats.Header, body []byte, prev uint64) {
	sum := sha256.Sum256(body)
	bodyHash := hex.EncodeToString(sum[:])
	sig := ed25519.Sign(s.key, TaskCommitSigningInput(subject, prev, bodyHash, h.Get(HeaderTaskSummary)))
	h.Set(HeaderEdgeCredential, s.header)
	h.Set(HeaderEdgeSignature, base64.RawURLEncoding.EncodeToString(sig))
	h.Set(HeaderTaskBodySHA256, bodyHash)
	h.Set(HeaderTaskPrev, strconv.FormatUint(prev, 10))
}

// TaskCommitSignatureBytes is what SignTaskCommit adds to a message's
// headers, at most: for size checks before a write.
func (s *EdgeSigner) TaskCommitSignatureBytes() int {
	return len(HeaderEdgeCredential) + len(s.header) + len(HeaderEdgeSignature) + 86 +
		len(HeaderTaskBodySHA256) + 64 + len(HeaderTaskPrev) + 20 + 4*4
}

// CheckTaskCommit checks that a certified edge signed a task commit on
// subject with headers h, stored at stored, and returns the previous
// sequence it signed (the caller that knows the commit before it on the
// subject compares). With body nil only the headers are checked (the
// summary is the signed one); otherwise body must be the signed body.
func (v *EdgeVerifier) CheckTaskCommit(subject string, h nats.Header, body []byte, stored time.Time) (prev uint64, err error) {
	bodyHash := h.Get(HeaderTaskBodySHA256)
	prev, perr := strconv.ParseUint(h.Get(HeaderTaskPrev), 10, 64)
	if h.Get(HeaderEdgeSignature) != "" && (perr != nil || len(bodyHash) != 2*sha256.Size) {
		return 0, ErrEdgeSignature
	}
	if _, err := v.check(h.Get(HeaderEdgeCredential), h.Get(HeaderEdgeSignature), stored, func() []byte {
		return TaskCommitSigningInput(subject, prev, bodyHash, h.Get(HeaderTaskSummary))
	}); err != nil {
		return 0, err
	}
	if body != nil {
		sum := sha256.Sum256(body)
		if hex.EncodeToString(sum[:]) != bodyHash {
			return 0, ErrEdgeSignature
		}
	}
	return prev, nil
}

// StoredTime is when the stream stored a message read by a direct get,
// from its Nats-Time-Stamp header; the zero time when it has none.
func StoredTime(h nats.Header) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, ServerHeader(h, "Nats-Time-Stamp"))
	return t
}

// ServerHeader is the value the server set for key on a direct get reply.
// The server appends its own after the message's stored headers, so a
// publisher that wrote a header of the same name (a forged sequence or
// time) comes first: the server's is the last value.
func ServerHeader(h nats.Header, key string) string {
	v := h.Values(key)
	if len(v) == 0 {
		return ""
	}
	return v[len(v)-1]
}
