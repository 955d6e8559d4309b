package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Headers of a JetStream atomic batch publish (ADR-50).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

const (
	// maxBatchMessages is the server's limit of messages in one atomic
	// batch.
	maxBatchMessages = 1000
	// maxBatchBytes bounds the commits of one batch, so that a batch of
	// large commits stays one short write.
	maxBatchBytes = 8 << 20
	// batchHeaderBytes is what the batch headers add to a message: the
	// batch id (a UUID), the sequence (at most 1000), the commit flag, and
	// ": " and CRLF for each.
	batchHeaderBytes = len(batchIDHeader) + 36 + len(batchSeqHeader) + 4 + len(batchCommitHeader) + 1 + 3*4
)

// committer is a Store's group commit on a single-replica stream, where
// the server fsyncs every message on its own, one after the other: when
// enough commits on distinct tasks wait at once, it writes them as one
// atomic batch, one fsync for all. Below that it lets every commit go out
// as a message of its own, concurrently, exactly as without it.
//
// Like edges/eventwriter it has no long-lived goroutine: the call that
// makes a batch due starts a flusher, which writes batches, one at a time
// (the server serialises a stream's batches anyway), while they are due
// and then ends.
type committer struct {
	nc        *nats.Conn
	timeout   time.Duration // of a batch's commit request
	threshold int
	log       *slog.Logger

	mu       sync.Mutex
	queue    []*pending
	subjects map[string]int // queued commits per subject
	singles  int            // commits being published alone
	flushing bool           // a batch is being written
	off      bool           // the stream refuses batches: publish alone from now on
	stat     batchStats
}

// batchStats counts what the committer did, for tests.
type batchStats struct {
	batches, commits int // batches stored and the commits they held
	refused          int // batches refused (their commits went alone)
}

// pending is one commit waiting for its write.
type pending struct {
	ctx    context.Context // the caller's: a commit whose caller left before its write is not written
	msg    *nats.Msg
	id     string // commit id: the message id
	expect uint64 // expected last sequence of the subject
	size   int
	done   chan outcome // buffered: the flusher never blocks on a caller that left
	left   bool         // its caller left while its batch was being written
}

// outcome is what a pending commit's caller learns.
type outcome struct {
	seq   uint64
	alone bool // not written: publish it as a message of its own
	err   error
}

func newCommitter(js jetstream.JetStream, threshold int, log *slog.Logger) *committer {
	timeout := js.Options().DefaultTimeout // what a publish without a deadline waits
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	return &committer{nc: js.Conn(), timeout: timeout, threshold: threshold, log: log, subjects: map[string]int{}}
}

// append publishes msg, a commit of size bytes (headers included) with
// message id commitID, expecting expect as the last sequence of its
// subject, and returns its stream sequence. Errors: ErrConflict when
// another commit on the task landed first; an unknownOutcomeError when
// it may or may not have landed; any other error means it was refused or
// not sent, nothing written.
func (s *Store) append(ctx context.Context, msg *nats.Msg, commitID string, expect uint64, size int) (uint64, error) {
	if s.batch != nil {
		if size+batchHeaderBytes > s.opts.maxMessageBytes {
			s.batch.goAlone() // too large with the batch headers
		} else if seq, alone, err := s.batch.append(ctx, &pending{
			ctx: ctx, msg: msg, id: commitID, expect: expect, size: size, done: make(chan outcome, 1),
		}); !alone {
			return seq, err
		}
		defer s.batch.aloneDone()
	}
	return s.publishOne(ctx, msg, commitID, expect)
}

// publishOne publishes a commit as a message of its own.
func (s *Store) publishOne(ctx context.Context, msg *nats.Msg, commitID string, expect uint64) (uint64, error) {
	ack, err := s.js.PublishMsg(ctx, msg,
		jetstream.WithMsgID(commitID),
		jetstream.WithExpectLastSequencePerSubject(expect))
	if err != nil {
		var apiErr *jetstream.APIError
		switch {
		case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
			return 0, ErrConflict
		case apiErr != nil && atLimit(apiErr) != nil:
			return 0, fmt.Errorf("append to %s: %w: %s", msg.Subject, atLimit(apiErr), apiErr.Description) // refused: nothing written
		case apiErr != nil, errors.Is(err, jetstream.ErrNoStreamResponse):
			return 0, fmt.Errorf("append to %s: %w", msg.Subject, err) // refused: nothing written
		}
		return 0, fmt.Errorf("append to %s: %w", msg.Subject, &unknownOutcomeError{err})
	}
	return ack.Sequence, nil
}

// append queues p and waits for its outcome. alone means p was not
// written and the caller publishes it itself (then calls aloneDone).
func (c *committer) append(ctx context.Context, p *pending) (seq uint64, alone bool, err error) {
	c.mu.Lock()
	c.queue = append(c.queue, p)
	c.subjects[p.msg.Subject]++
	b := c.dispatchLocked()
	c.mu.Unlock()
	if b != nil {
		go c.flush(b)
	}
	select {
	case o := <-p.done:
		return o.seq, o.alone, o.err
	case <-ctx.Done():
		return c.leave(p)
	}
}

// leave is append's caller giving up (its ctx ended).
func (c *committer) leave(p *pending) (uint64, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	notWritten := fmt.Errorf("append to %s: %w", p.msg.Subject, p.ctx.Err())
	if i := slices.Index(c.queue, p); i >= 0 {
		c.queue = slices.Delete(c.queue, i, i+1)
		c.forgetLocked(p)
		if b := c.dispatchLocked(); b != nil { // fewer queued never makes a batch due; be safe
			go c.flush(b)
		}
		return 0, false, notWritten
	}
	select {
	case o := <-p.done:
		if o.alone { // released but not yet published: it never will be
			c.singles--
			if b := c.dispatchLocked(); b != nil {
				go c.flush(b)
			}
			return 0, false, notWritten
		}
		return o.seq, false, o.err
	default: // in the batch being written
		p.left = true
		return 0, false, fmt.Errorf("append to %s: %w", p.msg.Subject, &unknownOutcomeError{p.ctx.Err()})
	}
}

// goAlone counts a commit published alone without queueing.
func (c *committer) goAlone() {
	c.mu.Lock()
	c.singles++
	c.mu.Unlock()
}

// aloneDone ends a commit published alone: with fewer in flight, what
// waits may go out.
func (c *committer) aloneDone() {
	c.mu.Lock()
	c.singles--
	b := c.dispatchLocked()
	c.mu.Unlock()
	if b != nil {
		go c.flush(b)
	}
}

func (c *committer) forgetLocked(p *pending) {
	if c.subjects[p.msg.Subject]--; c.subjects[p.msg.Subject] <= 0 {
		delete(c.subjects, p.msg.Subject)
	}
}

// dispatchLocked decides what the queue does next, called whenever it or
// the commits in flight change. While a batch is being written, commits
// wait for the next one. With at least threshold distinct subjects
// queued, it takes the next batch (the caller starts a flusher on it).
// Otherwise the queued commits go out alone when that keeps fewer than
// threshold in flight, or when nothing else is in flight (only repeated
// subjects wait: no later event would release them); else they wait for
// the commits in flight, whose completion calls it again.
func (c *committer) dispatchLocked() []*pending {
	if c.flushing || len(c.queue) == 0 {
		return nil
	}
	if !c.off && len(c.subjects) >= c.threshold {
		if b := c.takeLocked(); len(b) > 0 {
			c.flushing = true
			return b
		}
	}
	if c.off || c.singles+len(c.queue) < c.threshold || c.singles == 0 {
		for _, p := range c.queue {
			c.forgetLocked(p)
			c.singles++
			p.done <- outcome{alone: true}
		}
		c.queue = nil
	}
	return nil
}

// takeLocked removes the next batch from the queue: in queue order, one
// commit per subject (the second of a subject waits for a later batch or
// goes alone), within the server's and our size limits. A commit whose
// caller has left is dropped, not written.
func (c *committer) takeLocked() []*pending {
	var b []*pending
	in := map[string]bool{}
	size := 0
	rest := make([]*pending, 0, len(c.queue))
	for _, p := range c.queue {
		switch {
		case p.ctx.Err() != nil:
			c.forgetLocked(p)
			p.done <- outcome{err: fmt.Errorf("append to %s: %w", p.msg.Subject, p.ctx.Err())}
		case len(b) < maxBatchMessages && !in[p.msg.Subject] && (len(b) == 0 || size+p.size <= maxBatchBytes):
			c.forgetLocked(p)
			in[p.msg.Subject] = true
			size += p.size
			b = append(b, p)
		default:
			rest = append(rest, p)
		}
	}
	c.queue = rest
	return b
}

// flush writes batches until none is due.
func (c *committer) flush(b []*pending) {
	for b != nil {
		seq, refused, err := c.write(b)
		c.mu.Lock()
		c.settleLocked(b, seq, refused, err)
		c.flushing = false
		b = c.dispatchLocked()
		c.mu.Unlock()
	}
}

// settleLocked gives every commit of batch b its outcome. A batch is all
// or nothing: stored, each commit has its sequence; refused (a stale
// expected sequence, a duplicate message id, …: the server does not say
// which commit), none is, and each is published alone for its own exact
// result; unanswered, each may or may not be.
func (c *committer) settleLocked(b []*pending, last uint64, refused bool, err error) {
	switch {
	case err == nil:
		c.stat.batches++
		c.stat.commits += len(b)
		first := last - uint64(len(b)) + 1
		for i, p := range b {
			p.done <- outcome{seq: first + uint64(i)}
		}
	case refused:
		c.stat.refused++
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeAtomicPublishDisabled {
			c.off = true
			c.log.Warn("taskstore: the task stream refuses atomic batches; publishing every commit alone", "err", err)
		} else {
			c.log.Debug("taskstore: batch refused; publishing its commits alone", "commits", len(b), "err", err)
		}
		for _, p := range b {
			if !p.left {
				c.singles++
				p.done <- outcome{alone: true}
			}
		}
	default:
		for _, p := range b {
			p.done <- outcome{err: fmt.Errorf("append to %s: %w", p.msg.Subject, &unknownOutcomeError{err})}
		}
	}
}

// jsErrCodeAtomicPublishDisabled is the server's answer to a batch on a
// stream without AllowAtomicPublish.
const jsErrCodeAtomicPublishDisabled jetstream.ErrorCode = 10174

// batchAck is the answer to a batch's commit: the PubAck of its last
// message, with the batch id and size, or an error.
type batchAck struct {
	Error  *jetstream.APIError `json:"error,omitempty"`
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Batch  string              `json:"batch"`
	Count  int                 `json:"count"`
}

// write publishes b as one atomic batch and returns the stream sequence
// of its last message (the batch is stored contiguously, in order).
// refused means nothing was written (the server refused the batch, or
// its commit was never sent); any other error leaves the outcome unknown.
// Only the commit asks for an answer: an error in an earlier message
// makes the server refuse the commit as an incomplete batch.
func (c *committer) write(b []*pending) (last uint64, refused bool, err error) {
	id := uuid.NewString()
	var commit *nats.Msg
	for i, p := range b {
		m := &nats.Msg{Subject: p.msg.Subject, Data: p.msg.Data, Header: maps.Clone(p.msg.Header)}
		m.Header.Set(jetstream.MsgIDHeader, p.id)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.expect, 10))
		m.Header.Set(batchIDHeader, id)
		m.Header.Set(batchSeqHeader, strconv.Itoa(i+1))
		if i == len(b)-1 {
			m.Header.Set(batchCommitHeader, "1")
			commit = m
			break
		}
		if err := c.nc.PublishMsg(m); err != nil {
			return 0, true, fmt.Errorf("publish batch %s: %w", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	resp, err := c.nc.RequestMsgWithContext(ctx, commit)
	if err != nil {
		// No responders: nothing received the commit, so nothing is stored.
		return 0, errors.Is(err, nats.ErrNoResponders), fmt.Errorf("commit batch %s: %w", id, err)
	}
	var ack batchAck
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return 0, false, fmt.Errorf("commit batch %s: %w: %v", id, jetstream.ErrInvalidJSAck, err)
	}
	if ack.Error != nil {
		return 0, true, fmt.Errorf("commit batch %s: %w", id, ack.Error)
	}
	if ack.Batch != id || ack.Count != len(b) || ack.Seq < uint64(len(b)) {
		return 0, false, fmt.Errorf("commit batch %s of %d: %w: batch %q, count %d, seq %d",
			id, len(b), jetstream.ErrInvalidJSAck, ack.Batch, ack.Count, ack.Seq)
	}
	return ack.Seq, false, nil
}

func (c *committer) stats() batchStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stat
}
