package natstest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// Refusals collects the permission violations the server tells a
// connection of: set its Handler as the connection's error handler.
type Refusals chan error

// NewRefusals returns an empty collection.
func NewRefusals() Refusals { return make(Refusals, 64) }

// Handler is the connection error handler that collects refusals.
func (r Refusals) Handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if errors.Is(err, nats.ErrPermissionViolation) {
		select {
		case r <- err:
		default:
		}
	}
}

// Option sets the handler on a connection being made.
func (r Refusals) Option() nats.Option { return nats.ErrorHandler(r.Handler) }

// Action is one thing a connection tries: a publish to Pub or a
// subscription to Sub.
type Action struct{ Pub, Sub string }

// Subject is the subject the action names.
func (a Action) Subject() string {
	if a.Pub != "" {
		return a.Pub
	}
	return a.Sub
}

// ExpectRefused does a on nc and fails the test unless the server refuses
// it with a permissions violation naming its subject within 5 s.
func (r Refusals) ExpectRefused(t testing.TB, nc *nats.Conn, what string, a Action) {
	t.Helper()
	if a.Pub != "" {
		if err := nc.Publish(a.Pub, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	} else {
		s, err := nc.SubscribeSync(a.Sub)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = s.Unsubscribe() }()
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r:
		if !strings.Contains(err.Error(), a.Subject()) {
			t.Errorf("%s at %q: refused %v, want a refusal of that subject", what, a.Subject(), err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("%s: %q was not refused", what, a.Subject())
	}
}

// ExpectNone fails the test if the server refused anything so far.
func (r Refusals) ExpectNone(t testing.TB, nc *nats.Conn, what string) {
	t.Helper()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-r:
		t.Errorf("%s: refused: %v", what, err)
	case <-time.After(200 * time.Millisecond):
	}
}
