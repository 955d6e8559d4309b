// Package linewriter writes newline-delimited messages to a peer over a
// pipe, one at a time, each within a deadline. A peer that stops reading
// (an editor hung, or a process that never drains its stdin) fills the
// pipe and would block a plain Write forever, and with it every caller
// waiting to write and every shutdown waiting for them; here a write that
// cannot finish in time fails, and so does every later one.
package linewriter

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// DefaultTimeout bounds one line's write by default: far longer than a
// reading peer needs for the largest line, short enough that a shutdown
// waiting on a stuck one ends soon.
const DefaultTimeout = 10 * time.Second

// ErrStuck is the error of a write that did not finish within the
// timeout, and of every write after it: the peer stopped reading.
var ErrStuck = errors.New("the peer stopped reading")

// deadliner is a writer with write deadlines (a pollable *os.File, a
// net.Conn).
type deadliner interface {
	SetWriteDeadline(time.Time) error
}

// Writer writes lines to w, each within timeout. It is safe for
// concurrent use; lines never interleave.
type Writer struct {
	w       io.Writer
	timeout time.Duration

	mu     sync.Mutex
	broken error // set once a write timed out or failed: all later ones fail
}

// New is a Writer on w whose writes each take at most timeout
// (DefaultTimeout when timeout <= 0).
func New(w io.Writer, timeout time.Duration) *Writer {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Writer{w: w, timeout: timeout}
}

// WriteLine writes line and a newline. After a write that timed out or
// failed, the peer can no longer tell where a message begins, so every
// later write fails at once with the same error.
func (l *Writer) WriteLine(line []byte) error {
	buf := append(line[:len(line):len(line)], '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken != nil {
		return l.broken
	}
	err := l.write(buf)
	if err != nil {
		l.broken = err
	}
	return err
}

// write writes buf within the timeout: with the writer's own deadline
// when it has one, else from a goroutine it stops waiting for (left
// blocked until the pipe closes; the writer is broken by then, so
// nothing else writes behind it).
func (l *Writer) write(buf []byte) error {
	if d, ok := l.w.(deadliner); ok && d.SetWriteDeadline(time.Now().Add(l.timeout)) == nil {
		_, err := l.w.Write(buf)
		_ = d.SetWriteDeadline(time.Time{})
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("write: %w: nothing read for %s", ErrStuck, l.timeout)
		}
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.w.Write(buf)
		done <- err
	}()
	t := time.NewTimer(l.timeout)
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("write: %w", err)
		}
		return nil
	case <-t.C:
		return fmt.Errorf("write: %w: nothing read for %s", ErrStuck, l.timeout)
	}
}
