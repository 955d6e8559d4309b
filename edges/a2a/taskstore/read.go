package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// defaultReadBatch is how many messages one direct get request asks for.
const defaultReadBatch = 256

// numPendingHeader counts the messages past a direct get batch.
const numPendingHeader = "Nats-Num-Pending"

// directGet is the body of a batched direct get ($JS.API.DIRECT.GET).
type directGet struct {
	Seq     uint64 `json:"seq,omitempty"`
	NextFor string `json:"next_by_subj"`
	Batch   int    `json:"batch"`
}

// readCommits calls fn with every message on subject, in stream order,
// using batched direct gets: one request per s.readBatch messages, served
// by any replica of the stream (with Replicas > 1 a follower may be a few
// milliseconds behind the leader, as for a JetStream KV get; writers are
// not affected, the leader checks the expected sequence). A subject with
// no messages calls fn never and returns nil.
func (s *Store) readCommits(ctx context.Context, subject string, fn func(seq uint64, msgID string, data []byte) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.js.Options().DefaultTimeout)
		defer cancel()
	}
	inbox := s.nc.NewInbox()
	// One request asks for at most s.readBatch messages and an end marker,
	// and all of them are read before the next request: a channel of that
	// size never overflows (SubscribeSync would allocate 64k slots).
	ch := make(chan *nats.Msg, s.readBatch+2)
	sub, err := s.nc.ChanSubscribe(inbox, ch)
	if err != nil {
		return fmt.Errorf("read %s: subscribe: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	apiSubject := s.apiPrefix + "DIRECT.GET." + StreamName
	var from uint64
	for {
		req, err := json.Marshal(directGet{Seq: from, NextFor: subject, Batch: s.readBatch})
		if err != nil {
			return fmt.Errorf("read %s: %w", subject, err)
		}
		if err := s.nc.PublishRequest(apiSubject, inbox, req); err != nil {
			return fmt.Errorf("read %s: request: %w", subject, err)
		}
		more, last, err := s.readReplies(ctx, ch, subject, fn)
		if err != nil {
			return err
		}
		if !more {
			return nil
		}
		from = last + 1
	}
}

// readReplies consumes one batch's replies up to its end-of-batch marker.
// It reports whether messages remain past the batch and the sequence of
// the last one delivered.
func (s *Store) readReplies(ctx context.Context, ch <-chan *nats.Msg, subject string, fn func(uint64, string, []byte) error) (more bool, last uint64, err error) {
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return false, 0, fmt.Errorf("read %s: %w", subject, ctx.Err())
		}
		switch status := m.Header.Get("Status"); status {
		case "":
		case "404": // nothing (more) on the subject
			return false, last, nil
		case "204": // end of batch
			pending, _ := strconv.ParseUint(m.Header.Get(numPendingHeader), 10, 64)
			return pending > 0 && last > 0, last, nil
		case "503":
			return false, 0, fmt.Errorf("read %s: %w", subject, nats.ErrNoResponders)
		default:
			return false, 0, fmt.Errorf("read %s: direct get status %s: %s", subject, status, m.Header.Get("Description"))
		}
		seq, err := strconv.ParseUint(m.Header.Get(jetstream.SequenceHeader), 10, 64)
		if err != nil || seq <= last {
			return false, 0, fmt.Errorf("read %s: %w", subject, errors.New("direct get reply without a valid sequence"))
		}
		last = seq
		if err := fn(seq, m.Header.Get(jetstream.MsgIDHeader), m.Data); err != nil {
			return false, 0, err
		}
	}
}
