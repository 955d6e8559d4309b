package taskstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/chio-ledger/chio/internal/backoff"
	"github.com/chio-ledger/chio/schemas"
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

// readCommits calls fn with every message on subject, in stream order. A
// subject with no messages calls fn never and returns nil.
//
// Reads are batched direct gets, which any replica of the stream answers.
// With Replicas > 1 a follower can lag the leader, so a task just written
// (by this replica or another) could read as missing or old: a create
// followed by its first transition would fail with ErrNotFound, and CAS
// retries would spin on stale state (the cluster failure test showed
// both). So a replicated read first asks the leader for the subject's last
// sequence and accepts a direct read only once it reaches that floor:
// read-your-writes across replicas at the cost of one leader round trip.
func (s *Store) readCommits(ctx context.Context, subject string, fn func(seq uint64, h nats.Header, data []byte) error) error {
	if s.opts.replicas <= 1 {
		_, err := s.readDirect(ctx, subject, 0, fn)
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.js.Options().DefaultTimeout)
		defer cancel()
	}
	floor, err := s.leaderLast(ctx, subject)
	if err != nil || floor == 0 {
		return err
	}
	type message struct {
		seq  uint64
		h    nats.Header
		data []byte
	}
	for attempt := 1; ; attempt++ {
		var msgs []message
		last, err := s.readDirect(ctx, subject, leaderAttempt, func(seq uint64, h nats.Header, data []byte) error {
			msgs = append(msgs, message{seq, h, data})
			return nil
		})
		if (errors.Is(err, errUnanswered) || errors.Is(err, nats.ErrNoResponders)) && ctx.Err() == nil {
			// A replica that died or was cut off with the request: another
			// one answers the next.
			_ = backoff.Sleep(ctx, retryPause(attempt)) // an ended ctx ends the next attempt
			continue
		}
		if err != nil {
			return err
		}
		if last >= floor {
			for _, m := range msgs {
				if err := fn(m.seq, m.h, m.data); err != nil {
					return err
				}
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("read %s: the replica that answered is behind the leader (sequence %d, want %d): %w", subject, last, floor, ctx.Err())
		case <-time.After(min(time.Duration(attempt)*2*time.Millisecond, 20*time.Millisecond)):
		}
	}
}

// leaderAttempt bounds one request to the stream leader or one batch of a
// replicated direct read, so that a request lost to a leader election or
// a dropped node is asked again within the caller's deadline instead of
// using all of it.
const leaderAttempt = time.Second

// errUnanswered marks a direct get batch nobody answered in time.
var errUnanswered = errors.New("no replica answered")

// retryPause is the pause before asking a replicated stream again: short
// at first (an election takes a moment), never long.
func retryPause(attempt int) time.Duration {
	return min(time.Duration(attempt)*50*time.Millisecond, 250*time.Millisecond)
}

// leaderLast asks the stream leader (the non-direct message get) for the
// last sequence on subject, 0 if it has none. While the stream has no
// reachable leader (an election after a node died, or this client's node
// cut off) the request goes unanswered or is refused with a 503; it is
// retried until ctx ends, since a read is safe to repeat.
func (s *Store) leaderLast(ctx context.Context, subject string) (uint64, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, leaderAttempt)
		seq, err := s.leaderLastOnce(actx, subject)
		cancel()
		if err == nil || !errors.Is(err, errLeaderUnavailable) || ctx.Err() != nil {
			return seq, err
		}
		_ = backoff.Sleep(ctx, retryPause(attempt)) // an ended ctx ends the next attempt at once
	}
}

// errLeaderUnavailable marks a leader request that may succeed if asked
// again.
var errLeaderUnavailable = errors.New("stream leader unavailable")

func (s *Store) leaderLastOnce(ctx context.Context, subject string) (uint64, error) {
	req, err := json.Marshal(struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", subject, err)
	}
	m, err := s.nc.RequestWithContext(ctx, s.apiPrefix+"STREAM.MSG.GET."+StreamName, req)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return 0, fmt.Errorf("read %s: last sequence from the leader: %w: %w", subject, errLeaderUnavailable, err)
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: last sequence from the leader: %w", subject, err)
	}
	var resp struct {
		Message *struct {
			Seq uint64 `json:"seq"`
		} `json:"message"`
		Error *struct {
			Code    int    `json:"code"`
			ErrCode int    `json:"err_code"`
			Desc    string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		return 0, fmt.Errorf("read %s: last sequence from the leader: %w", subject, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == 10037: // JSNoMessageFoundErr: nothing on the subject
		return 0, nil
	case resp.Error != nil && resp.Error.Code == 503: // no leader, or JetStream unavailable for now
		return 0, fmt.Errorf("read %s: last sequence from the leader: %w: %s (%d)", subject, errLeaderUnavailable, resp.Error.Desc, resp.Error.ErrCode)
	case resp.Error != nil:
		return 0, fmt.Errorf("read %s: last sequence from the leader: %s (%d)", subject, resp.Error.Desc, resp.Error.ErrCode)
	case resp.Message == nil:
		return 0, fmt.Errorf("read %s: last sequence from the leader: empty answer", subject)
	}
	return resp.Message.Seq, nil
}

// readDirect calls fn with every message on subject using batched direct
// gets, one request per s.readBatch messages, and returns the last
// sequence read (0 if none). With perBatch set, a batch not answered
// within it fails with errUnanswered.
func (s *Store) readDirect(ctx context.Context, subject string, perBatch time.Duration, fn func(seq uint64, h nats.Header, data []byte) error) (uint64, error) {
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
		return 0, fmt.Errorf("read %s: subscribe: %w", subject, err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	apiSubject := s.apiPrefix + "DIRECT.GET." + StreamName
	var from, highest uint64
	for {
		req, err := json.Marshal(directGet{Seq: from, NextFor: subject, Batch: s.readBatch})
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", subject, err)
		}
		if err := s.nc.PublishRequest(apiSubject, inbox, req); err != nil {
			return 0, fmt.Errorf("read %s: request: %w", subject, err)
		}
		bctx, cancel := ctx, context.CancelFunc(func() {})
		if perBatch > 0 {
			bctx, cancel = context.WithTimeout(ctx, perBatch)
		}
		more, last, err := s.readReplies(bctx, ch, subject, fn)
		cancel()
		if err != nil && ctx.Err() == nil && bctx.Err() != nil {
			return 0, fmt.Errorf("read %s: %w within %s", subject, errUnanswered, perBatch)
		}
		if err != nil {
			return 0, err
		}
		highest = max(highest, last)
		if !more {
			return highest, nil
		}
		from = last + 1
	}
}

// readReplies consumes one batch's replies up to its end-of-batch marker.
// It reports whether messages remain past the batch and the sequence of
// the last one delivered.
func (s *Store) readReplies(ctx context.Context, ch <-chan *nats.Msg, subject string, fn func(uint64, nats.Header, []byte) error) (more bool, last uint64, err error) {
	for {
		var m *nats.Msg
		select {
		case m = <-ch:
		case <-ctx.Done():
			return false, 0, fmt.Errorf("read %s: %w", subject, ctx.Err())
		}
		// A message's reply always carries the server's sequence; a status
		// reply never does. Telling them apart by that, not by a Status
		// header, keeps a commit published with a Status header of its own
		// from ending the read early.
		status := ""
		if len(m.Header.Values(jetstream.SequenceHeader)) == 0 {
			status = cmp.Or(m.Header.Get("Status"), "no sequence")
		}
		switch status {
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
		seq, err := strconv.ParseUint(schemas.ServerHeader(m.Header, jetstream.SequenceHeader), 10, 64)
		if err != nil || seq <= last {
			return false, 0, fmt.Errorf("read %s: %w", subject, errors.New("direct get reply without a valid sequence"))
		}
		last = seq
		if err := fn(seq, m.Header, m.Data); err != nil {
			return false, 0, err
		}
	}
}
