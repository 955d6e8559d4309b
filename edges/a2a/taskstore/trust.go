package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/schemas"
)

// authentic reports whether a commit (seq on subject, headers h, body
// data or nil for a headers-only read, stored at stored) is honoured:
// always without edge trust, else only when a certified edge signed it.
// prev is the previous sequence the edge signed, -1 when not checked.
// A refused commit is logged; its events are never applied.
func (s *Store) authentic(subject string, seq uint64, h nats.Header, data []byte, stored time.Time) (prev int64, ok bool) {
	if s.opts.verifier == nil {
		return -1, true
	}
	p, err := s.opts.verifier.CheckTaskCommit(subject, h, data, stored)
	if err != nil {
		s.opts.log.Warn("taskstore: skipping a commit no certified edge signed", "subject", subject, "seq", seq, "reason", err)
		return -1, false
	}
	return int64(p), true
}

// readSummary is the summary of the commit seq on subject with headers h,
// stored at stored, if it is honoured (see authentic).
func (s *Store) readSummary(subject string, seq uint64, h nats.Header, stored time.Time) (summary, error) {
	if _, ok := s.authentic(subject, seq, h, nil, stored); !ok {
		return summary{}, errUnsigned
	}
	return decodeSummary(h.Get(summaryHeader))
}

// errUnsigned marks a commit refused for want of an edge's signature.
var errUnsigned = errors.New("commit not signed by a certified edge")

// replayed reports whether a commit (seq on subject, signed to follow
// prev) was replayed: another message on the subject lies between prev and
// it. Readers that see a task's every commit in order compare prev with
// the one before; Follow, which sees commits of many tasks, asks the
// stream for the first message on the subject after prev.
func (s *Store) replayed(ctx context.Context, subject string, prev int64, seq uint64) (bool, error) {
	if prev < 0 {
		return false, nil
	}
	req, err := json.Marshal(directGet{Seq: uint64(prev) + 1, NextFor: subject})
	if err != nil {
		return false, err
	}
	m, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"DIRECT.GET."+StreamName, req)
	if err != nil {
		return false, fmt.Errorf("read %s after %d: %w", subject, prev, err)
	}
	next, err := strconv.ParseUint(schemas.ServerHeader(m.Header, jetstream.SequenceHeader), 10, 64)
	if err != nil {
		return false, fmt.Errorf("read %s after %d: status %s %s", subject, prev, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	return next != seq, nil
}

// lastCommit reads the last commit on subject by a direct get, with the
// server's own subject, sequence and time (schemas.ServerHeader): a
// commit that carries such headers of its own cannot pass for another
// task's. found is false when the subject holds none.
func (s *Store) lastCommit(ctx context.Context, subject string) (seq uint64, h nats.Header, stored time.Time, found bool, err error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return 0, nil, time.Time{}, false, err
	}
	m, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"DIRECT.GET."+StreamName, req)
	if err != nil {
		return 0, nil, time.Time{}, false, fmt.Errorf("read the last commit of %s: %w", subject, err)
	}
	if m.Header.Get("Status") == "404" {
		return 0, nil, time.Time{}, false, nil
	}
	seq, err = strconv.ParseUint(schemas.ServerHeader(m.Header, jetstream.SequenceHeader), 10, 64)
	if err != nil || schemas.ServerHeader(m.Header, jetstream.SubjectHeader) != subject {
		return 0, nil, time.Time{}, false, fmt.Errorf("read the last commit of %s: status %s %s", subject, m.Header.Get("Status"), m.Header.Get("Description"))
	}
	return seq, m.Header, schemas.StoredTime(m.Header), true, nil
}
