package projections

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"maps"
	"net/http"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/chio-ledger/chio/internal/edgetest"
	"github.com/chio-ledger/chio/schemas"
)

// TestOnlySignedTaskCommitsAreFolded: with edge trust, the projections
// serve a task only as certified edges wrote it. An unsigned commit, one
// under a stranger issuer's credential, a signed body swapped for another
// and a genuine commit replayed later all reach the stream and change
// nothing served; a forged task is not found. A rebuild with the same
// trust serves the same.
func TestOnlySignedTaskCommitsAreFolded(t *testing.T) {
	h := newHarness(t)
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	edge, other := edgetest.Certified(t, issuer, "edge-1"), edgetest.Certified(t, stranger, "edge-x")
	trust := func() *schemas.EdgeVerifier {
		return schemas.NewEdgeVerifier([]string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}, nil)
	}
	body := func(events ...schemas.TaskEvent) []byte {
		raw, err := json.Marshal(schemas.TaskCommit{V: schemas.TaskCommitVersion, Events: events})
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	signed := func(sg *schemas.EdgeSigner, subject string, data []byte, prev uint64) nats.Header {
		hdr := nats.Header{}
		hdr.Set(schemas.HeaderTaskSummary, "c3VtbWFyeQ")
		if sg != nil {
			sg.SignTaskCommit(subject, hdr, data, prev)
		}
		return hdr
	}
	subject, forged := schemas.TaskSubject("task-a"), schemas.TaskSubject("task-f")
	working := schemas.TaskEvent{Type: schemas.TaskEventStatus, Time: at(1), State: schemas.TaskWorking}
	result := body(schemas.TaskEvent{Type: schemas.TaskEventArtifact, Time: at(2), Artifact: artifact("forged", "transfer")},
		schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(2), State: schemas.TaskCompleted})

	first := body(created("c", 0))
	s1 := h.publish(subject, first, signed(edge, subject, first, 0))
	second := body(working)
	s2hdr := signed(edge, subject, second, s1)
	s2 := h.publish(subject, second, maps.Clone(s2hdr))
	h.publish(subject, result, signed(nil, "", nil, 0))                             // unsigned
	h.publish(subject, result, signed(other, subject, result, s2))                  // a stranger's credential
	h.publish(subject, result, signed(edge, subject, body(working), s2))            // the body swapped
	last := h.publish(subject, second, s2hdr)                                       // replayed
	h.publish(forged, first, signed(nil, "", nil, 0))                               // a forged task
	h.publish(forged, first, signed(edge, schemas.TaskSubject("task-a"), first, 0)) // signed for another task
	failed := body(schemas.TaskEvent{Type: schemas.TaskEventFinished, Time: at(3), State: schemas.TaskFailed})
	h.publish(subject, failed, signed(edge, subject, failed, last)) // the edge's own end, after all of them

	check := func(svc *Service) {
		t.Helper()
		srv := server(t, svc)
		code, _, raw := get(t, srv.URL, "/v1/tasks/task-a", opToken)
		var got Task
		if err := json.Unmarshal(raw, &got); code != http.StatusOK || err != nil {
			t.Fatalf("task-a: %d %s", code, raw)
		}
		if got.Status.State != "TASK_STATE_FAILED" || len(got.Artifacts) != 0 {
			t.Fatalf("task-a is %s with %d artifacts, want the edge's failed task and no forged artifact: %s", got.Status.State, len(got.Artifacts), raw)
		}
		if code, _, raw := get(t, srv.URL, "/v1/tasks/task-f", opToken); code != http.StatusNotFound {
			t.Fatalf("forged task-f: %d %s, want 404", code, raw)
		}
	}
	r := h.start("live", WithEdgeTrust(trust()))
	h.caughtUp(r)
	check(r.Service)
	if n := testutil.ToFloat64(r.metrics.tasksRefused); n != 6 {
		t.Errorf("refused commits counted %v, want 6", n)
	}

	h.rebuild("rebuilt", WithEdgeTrust(trust()))
	rb := h.start("rebuilt", WithEdgeTrust(trust()))
	h.caughtUp(rb)
	check(rb.Service)
}
