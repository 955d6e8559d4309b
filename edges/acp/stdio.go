package acp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/chio-ledger/chio/edges/acp/internal/linewriter"
)

// MaxLineBytes bounds one stdio message.
const MaxLineBytes = 4 << 20

// maxInflight bounds the stdio requests handled at once: a slow tool
// does not hold up the others, a flood does not start unbounded work.
const maxInflight = 32

// ServeStdio serves the profile over newline-delimited JSON-RPC on in and
// out, every call under token (the dev capability when token is empty;
// params._meta.chioCapability overrides it per call), until in ends or
// ctx is done. The session's own token is checked at the start; a call
// that runs a tool or stores, resumes or cancels a task brings its proof
// of possession, if the token needs one, in params._meta.chioDpopProof
// (MetaDPoPProof), and one without is refused (see the package's holder
// binding). Requests are handled concurrently, so answers may come out
// of order (JSON-RPC matches them by id); every request read is answered
// before ServeStdio returns. A capability the kernel refuses at the start
// is an error. in is closed at the end when it is an io.Closer, which
// ends a read blocked on it; out is not. Each answer is written within
// the write timeout (WithWriteTimeout): an editor that stops reading
// fails that write and every later one, and ServeStdio then starts no
// further request and returns that error once those in flight end.
func (e *Edge) ServeStdio(ctx context.Context, token string, in io.Reader, out io.Writer) error {
	if token == "" {
		token = e.opts.devToken
	}
	if token == "" {
		return errors.New("serve acp over stdio: no capability and no dev capability")
	}
	if _, dec := e.kernel.Held(token); dec != nil {
		return fmt.Errorf("serve acp over stdio: capability refused at %s: %s", dec.Guard, dec.Reason)
	}
	conn := credential{token: token, held: true}
	w := &lineWriter{w: linewriter.New(out, e.opts.writeTimeout), broken: make(chan struct{})}
	lines := make(chan []byte)
	readErr := make(chan error, 1)
	done := make(chan struct{})
	defer close(done)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
		for sc.Scan() {
			line := append([]byte(nil), sc.Bytes()...)
			select {
			case lines <- line:
			case <-done:
				return
			}
		}
		readErr <- sc.Err()
	}()
	if c, ok := in.(io.Closer); ok {
		defer c.Close()
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxInflight)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.broken:
			// Nothing more can be answered: start nothing more.
			return fmt.Errorf("serve acp over stdio: %w", w.err)
		case err := <-readErr:
			if err != nil {
				return fmt.Errorf("serve acp over stdio: read: %w", err)
			}
			return nil
		case line := <-lines:
			if len(line) == 0 || isBlank(line) {
				continue
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				if ans := e.process(ctx, conn, line); ans != nil {
					if err := w.write(ans); err != nil {
						e.log.Warn("acp: answer not written", "err", err)
					}
				}
			}()
		}
	}
}

func isBlank(b []byte) bool {
	for _, c := range b {
		if c != ' ' && c != '\t' && c != '\r' {
			return false
		}
	}
	return true
}

// lineWriter writes one JSON message per line, one at a time, each
// within the write timeout. broken is closed, and err set, once a write
// failed: every later one fails too.
type lineWriter struct {
	w      *linewriter.Writer
	once   sync.Once
	broken chan struct{}
	err    error
}

func (l *lineWriter) write(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode answer: %w", err)
	}
	if err := l.w.WriteLine(raw); err != nil {
		err = fmt.Errorf("write answer: %w", err)
		l.once.Do(func() { l.err = err; close(l.broken) })
		return err
	}
	return nil
}
