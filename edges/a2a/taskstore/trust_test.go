package taskstore

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/edgetest"
	"github.com/chio-ledger/chio/schemas"
)

// TestOnlySignedCommitsAreHonoured: with edge trust, a task commit that no
// certified edge signed, or that was changed or replayed after signing,
// is honoured by no read: Load, List, Watch and Follow serve only what a
// certified edge wrote, though each forgery reached the stream (a client
// with the edge role's NATS permissions can publish any of them).
func TestOnlySignedCommitsAreHonoured(t *testing.T) {
	ctx := t.Context()
	ns := startNATS(t)
	_, issuer, _ := ed25519.GenerateKey(rand.Reader)
	_, stranger, _ := ed25519.GenerateKey(rand.Reader)
	edge := edgetest.Certified(t, issuer, "edge-1")
	trust := schemas.NewEdgeVerifier([]string{schemas.EncodePublicKey(issuer.Public().(ed25519.PublicKey))}, nil)
	s := openStore(t, ns, WithEdgeSigner(edge), WithEdgeTrust(trust))
	follow := startFollow(t, s)

	task, err := s.Create(ctx, alice, "ctx", msg("go"), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	working, err := s.Transition(ctx, task.ID, alice, func(*Task) ([]Event, error) {
		return []Event{StatusEvent(StateWorking, nil)}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := s.Watch(ctx, task.ID, alice)
	if err != nil {
		t.Fatal(err)
	}
	genuine, err := s.stream.GetMsg(ctx, working.Seq)
	if err != nil {
		t.Fatal(err)
	}

	// A forged result, and a forged task owned by alice.
	result, _ := json.Marshal(commit{V: commitVersion, Events: []Event{
		{Type: EventArtifact, Artifact: json.RawMessage(`{"forged":true}`), Time: time.Now()},
		{Type: EventFinished, State: StateCompleted, Time: time.Now()},
	}})
	forgedTask := uuid.Must(uuid.NewV7()).String()
	owner := alice
	created, _ := json.Marshal(commit{V: commitVersion, Events: []Event{
		{Type: EventCreated, Owner: &owner, ContextID: "ctx", Time: time.Now()},
		{Type: EventArtifact, Artifact: json.RawMessage(`{"forged":true}`), Time: time.Now()},
		{Type: EventFinished, State: StateCompleted, Time: time.Now()},
	}})
	sum, _ := encodeSummary(summary{Subject: alice.Subject, Tenant: alice.Tenant, ContextID: "ctx", State: StateCompleted, StatusTime: time.Now(), Created: time.Now()})
	signedBy := func(sg *schemas.EdgeSigner, subject string, body []byte, prev uint64) nats.Header {
		h := nats.Header{}
		h.Set(summaryHeader, sum)
		if sg != nil {
			sg.SignTaskCommit(subject, h, body, prev)
		}
		return h
	}
	strangerEdge := edgetest.Certified(t, stranger, "edge-x")
	// A genuine commit moved to another task, with the server's headers
	// forged to name the task it was signed for.
	movedTask := uuid.Must(uuid.NewV7()).String()
	moved := maps.Clone(genuine.Header)
	moved.Set(jetstream.SubjectHeader, Subject(task.ID))
	moved.Set(jetstream.SequenceHeader, strconv.FormatUint(working.Seq, 10))
	moved.Set("Nats-Time-Stamp", genuine.Time.Format(time.RFC3339Nano))
	tampered := signedBy(edge, Subject(task.ID), []byte(`{"v":1,"events":[]}`), working.Seq)
	forgeries := []struct {
		name    string
		subject string
		header  nats.Header
		body    []byte
	}{
		{"unsigned result", Subject(task.ID), signedBy(nil, "", nil, 0), result},
		{"result under a stranger issuer's credential", Subject(task.ID), signedBy(strangerEdge, Subject(task.ID), result, working.Seq), result},
		{"signed body swapped for another", Subject(task.ID), tampered, result},
		{"genuine commit replayed later", Subject(task.ID), maps.Clone(genuine.Header), genuine.Data},
		{"unsigned task", Subject(forgedTask), signedBy(nil, "", nil, 0), created},
		{"task signed for another subject", Subject(forgedTask), signedBy(edge, Subject(task.ID), created, 0), created},
		{"genuine commit moved with forged server headers", Subject(movedTask), moved, genuine.Data},
	}
	for _, f := range forgeries {
		for _, k := range []string{jetstream.MsgIDHeader, jetstream.ExpectedLastSubjSeqHeader, batchIDHeader, batchSeqHeader, batchCommitHeader} {
			f.header.Del(k)
		}
		if _, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: f.subject, Header: f.header, Data: f.body}); err != nil {
			t.Fatalf("%s: publish: %v", f.name, err)
		}
	}

	got, err := s.Load(ctx, task.ID, alice)
	if err != nil || got.State != StateWorking || len(got.Artifacts) != 0 {
		t.Fatalf("load after the forgeries: %+v, %v; want the genuine working task", got, err)
	}
	if _, err := s.Load(ctx, forgedTask, alice); !errors.Is(err, ErrNotFound) {
		t.Fatalf("load of the forged task: %v, want ErrNotFound", err)
	}
	for _, id := range []string{forgedTask, movedTask} {
		if _, err := s.Watch(ctx, id, alice); !errors.Is(err, ErrNotFound) {
			t.Fatalf("watch of the forged task %s: %v, want ErrNotFound", id, err)
		}
	}
	listed, _, _, err := s.List(ctx, alice, ListFilter{})
	if err != nil {
		t.Fatal(err)
	}
	// The genuine task's last commit is a forgery, so the list cannot
	// tell its summary: it is left out rather than shown as forged.
	if ids := taskIDs(listed); slices.Contains(ids, forgedTask) {
		t.Fatalf("list serves the forged task: %v", ids)
	}

	// The edge goes on writing; the task ends as the edge says.
	done, err := complete(ctx, s, task.ID, alice, StateFailed, nil, nil, nil)
	if err != nil || done.State != StateFailed || len(done.Artifacts) != 0 {
		t.Fatalf("genuine completion after the forgeries: %+v, %v", done, err)
	}
	listed, _, _, err = s.List(ctx, alice, ListFilter{})
	if err != nil || !slices.Equal(taskIDs(listed), []string{task.ID}) || listed[0].State != StateFailed {
		t.Fatalf("list after the genuine completion: %v, %v", taskIDs(listed), err)
	}

	// The watch sees the genuine events only, and ends with the edge's
	// own end.
	var seen []Event
	for _, e := range collect(t, watch, time.Minute) {
		if e.Type == EventArtifact || e.Seq != task.Seq && e.Seq != working.Seq && e.Seq != done.Seq {
			t.Fatalf("watch delivered a forged event: %v", describe([]Event{e}))
		}
		seen = append(seen, e)
	}
	if len(seen) == 0 || seen[len(seen)-1].State != StateFailed {
		t.Fatalf("watch: %v, want it to end failed", describe(seen))
	}

	// Follow delivers the three genuine commits and nothing else.
	var seqs []uint64
	for _, c := range followed(t, follow, task.ID, 3) {
		seqs = append(seqs, c.Seq)
	}
	select {
	case c := <-follow:
		t.Fatalf("follow delivered a forged commit of %s at %d", c.TaskID, c.Seq)
	case <-time.After(200 * time.Millisecond):
	}
	if len(seqs) != 3 || seqs[2] != done.Seq {
		t.Fatalf("followed commits %v, want the three genuine ones ending at %d", seqs, done.Seq)
	}
}

func taskIDs(tasks []*Task) []string {
	var out []string
	for _, t := range tasks {
		out = append(out, t.ID)
	}
	return out
}
