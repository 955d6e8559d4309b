package a2a

import (
	"context"
	"fmt"
	"net"
	"sync"

	"google.golang.org/grpc/peer"

	"github.com/chio-ledger/chio/edges/a2a/wire"
)

// DefaultMaxStreamsPerCaller is how many streams (SendStreamingMessage
// and SubscribeToTask, over SSE and gRPC together) one caller may hold
// open on a replica at once when Config.MaxStreamsPerCaller is 0. Each
// stream holds a task watch and its buffers until the task ends, so
// without a bound one caller could hold the replica's memory with idle
// subscriptions; a client following a few tasks at a time stays far
// below it.
const DefaultMaxStreamsPerCaller = 32

// streamSlots counts the streams each caller holds open.
type streamSlots struct {
	max  int
	mu   sync.Mutex
	held map[string]int
}

func newStreamSlots(max int) *streamSlots {
	if max <= 0 {
		max = DefaultMaxStreamsPerCaller
	}
	return &streamSlots{max: max, held: map[string]int{}}
}

// take holds one of key's slots, and returns the func that gives it back
// (once, whatever the number of calls), or false when key holds them all.
func (s *streamSlots) take(key string) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held[key] >= s.max {
		return nil, false
	}
	s.held[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.held[key]--; s.held[key] <= 0 {
				delete(s.held, key)
			}
		})
	}, true
}

// streamKey is who a stream counts against: the principal (the whole
// authority path, as task ownership is scoped) of a capability the
// caller presented, else, for a caller under the dev capability or with
// a capability that does not verify (refused right after), its network
// address, so unauthenticated callers do not share one budget.
func (e *Edge) streamKey(rc rpcCall) string {
	if !rc.caller.dev && rc.caller.token != "" {
		if id, d := e.kernel.Held(rc.caller.token); d == nil {
			return "principal " + id.Principal
		}
	}
	return "address " + rc.remote
}

// takeStream holds a stream slot for rc's caller, or answers
// ResourceExhausted.
func (e *Edge) takeStream(rc rpcCall) (func(), *wire.Error) {
	release, ok := e.streams.take(e.streamKey(rc))
	if !ok {
		return nil, wire.ResourceExhausted(fmt.Sprintf("this caller already holds %d open streams here; end one before opening another", e.streams.max))
	}
	return release, nil
}

// remoteHost is the host of an address (host:port), the address itself
// when it has no port.
func remoteHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

// grpcRemote is the host a gRPC call came from, "" if unknown.
func grpcRemote(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return remoteHost(p.Addr.String())
	}
	return ""
}
