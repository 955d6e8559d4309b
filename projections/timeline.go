package projections

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/schemas"
)

// timelineRecord is what the task fold keeps of one commit of a task: a
// small record under T | str(task id) | u64 commit seq, written once per
// commit that applied at least one event. Artifact bodies are not copied:
// the record names the artifact events (their index under the task's a
// keys), which the task keeps anyway.
type timelineRecord struct {
	Generation int64             `json:"g"`
	Time       string            `json:"t,omitempty"`
	State      schemas.TaskState `json:"s"`
	Events     []string          `json:"e"`
	Replica    string            `json:"r,omitempty"`
	ReceiptIDs []string          `json:"ri,omitempty"`
	Artifacts  []uint32          `json:"a,omitempty"`
}

// note adds an applied event, whose effect was eff and after which the
// task is h, to the record.
func (r *timelineRecord) note(e *schemas.TaskEvent, eff schemas.TaskEffect, h *schemas.TaskHead) {
	r.Events = append(r.Events, string(e.Type))
	if r.Time == "" {
		// The writer stamps every event of a commit with one time.
		r.Time = formatTime(e.Time)
	}
	switch e.Type {
	case schemas.TaskEventClaimed, schemas.TaskEventReleased:
		// A commit written before replicas named themselves in a header:
		// the claim says who holds it, and that replica wrote it.
		if r.Replica == "" {
			r.Replica = e.ReplicaID
		}
	case schemas.TaskEventReceipt:
		if eff.Served { // a link made before is not this commit's
			r.ReceiptIDs = append(r.ReceiptIDs, e.ReceiptID)
		}
	case schemas.TaskEventArtifact:
		r.Artifacts = append(r.Artifacts, uint32(h.Artifacts-1))
	}
}

// leaseEventOf reports whether e is a lease event (request, claimed,
// released) of the live task h. The projection keeps no lease, so whether
// the fold accepts such an event depends on where batches were cut; the
// timeline lists it as written whenever the task could take one, and so
// reads the same after a rebuild. It changes nothing served either way.
func leaseEventOf(e *schemas.TaskEvent, h *schemas.TaskHead) bool {
	switch e.Type {
	case schemas.TaskEventRequest, schemas.TaskEventClaimed, schemas.TaskEventReleased:
		return h != nil && h.State != "" && !h.State.Terminal()
	}
	return false
}

// write stores the record of commit seq of task id, after which the task
// is h.
func (r *timelineRecord) write(tx *txn, id string, seq uint64, h *schemas.TaskHead) {
	r.Generation, r.State = h.Generation, h.State
	raw, err := json.Marshal(r)
	if err != nil {
		tx.fail(fmt.Errorf("encode timeline of task %s at %d: %w", id, seq, err))
		return
	}
	tx.set(timelineKey(id, seq), raw)
}

func timelineKey(id string, seq uint64) []byte {
	return appendU64(appendStr([]byte{prefixTimeline}, id), seq)
}

// TaskTimeline is the body of GET /v1/tasks/{id}/timeline.
type TaskTimeline struct {
	ID string `json:"id"`
	// Generations has one entry per commit of the task, in stream order.
	Generations []TimelineEntry `json:"generations"`
}

// TimelineEntry is one commit of a task and the task after it.
type TimelineEntry struct {
	// Generation is the task's generation after the commit (a commit that
	// mutates nothing a client sees keeps the one before).
	Generation int64 `json:"generation"`
	// Seq is the commit's CHIO_TASKS stream sequence.
	Seq uint64 `json:"seq"`
	// Time is the commit's event time, RFC 3339 with nanoseconds, UTC.
	Time string `json:"time"`
	// State is the task's state after the commit ("working", …).
	State string `json:"state"`
	// Events are the types of the commit's applied events, in order.
	Events []string `json:"events"`
	// Replica is the edge replica that wrote the commit: its Chio-Replica
	// header, else the replica its claim or release names, else "".
	Replica string `json:"replica"`
	// ReceiptIDs are the receipts this commit linked to the task.
	ReceiptIDs []string `json:"receipt_ids"`
	// Artifacts are the commit's artifact events, as written.
	Artifacts []TimelineArtifact `json:"artifacts"`
}

// TimelineArtifact is one artifact event: the artifact (chunk) and
// whether it extends the artifact of the same id.
type TimelineArtifact struct {
	Append   bool            `json:"append"`
	Artifact json.RawMessage `json:"artifact"`
}

// getTimeline serves GET /v1/tasks/{id}/timeline: the task commit by
// commit. Visibility is GET /v1/tasks/{id}'s: a task the reader may not
// see is answered as one that does not exist (404 task_not_found).
// Commits folded before the projection kept timelines are not listed
// (a rebuild lists them).
func (s *Service) getTimeline(c echo.Context) error {
	snap := s.store.db.NewSnapshot()
	defer snap.Close()
	id, _, answered, err := s.visibleTask(c, snap)
	if answered {
		return err
	}
	tl, err := loadTimeline(snap, id)
	if err != nil {
		return s.internal(c, err)
	}
	return c.JSON(http.StatusOK, tl)
}

// loadTimeline reads the timeline records of task id and the artifact
// events they name.
func loadTimeline(v view, id string) (*TaskTimeline, error) {
	tl := &TaskTimeline{ID: id, Generations: []TimelineEntry{}}
	prefix := appendStr([]byte{prefixTimeline}, id)
	err := scan(v, prefix, func(k, val []byte) error {
		if len(k) != len(prefix)+8 {
			return fmt.Errorf("corrupt timeline key %q", k)
		}
		var r timelineRecord
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("decode: %w", err)
		}
		e := TimelineEntry{Generation: r.Generation, Seq: binary.BigEndian.Uint64(k[len(prefix):]), Time: r.Time,
			State: string(r.State), Events: r.Events, Replica: r.Replica, ReceiptIDs: r.ReceiptIDs, Artifacts: []TimelineArtifact{}}
		if e.Events == nil {
			e.Events = []string{}
		}
		if e.ReceiptIDs == nil {
			e.ReceiptIDs = []string{}
		}
		for _, n := range r.Artifacts {
			rec, err := getFrom(v, appendU32(appendStr([]byte{prefixArtifact}, id), n))
			if err != nil {
				return fmt.Errorf("artifact event %d: %w", n, err)
			}
			if len(rec) < 1 {
				return fmt.Errorf("artifact event %d: corrupt record", n)
			}
			e.Artifacts = append(e.Artifacts, TimelineArtifact{Append: rec[0] == 1, Artifact: rec[1:]})
		}
		tl.Generations = append(tl.Generations, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("timeline of task %s: %w", id, err)
	}
	return tl, nil
}
