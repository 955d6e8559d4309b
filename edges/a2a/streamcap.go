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

// DefaultMaxStreams is how many streams a replica holds open at once, all
// callers together, unless LimitStreams says otherwise. The per-caller
// bound does not bound the replica: many callers (or one caller under
// many principals) could each hold their share. At the bound a new
// stream is refused, not queued, so the streams already open and the
// replica's unary calls keep their memory and goroutines.
const DefaultMaxStreams = 4096

// streamSlots counts the streams each caller holds open, and all of them.
type streamSlots struct {
	mu    sync.Mutex
	max   int // per caller
	total int // per replica
	open  int
	held  map[string]int
}

func newStreamSlots(max int) *streamSlots {
	if max <= 0 {
		max = DefaultMaxStreamsPerCaller
	}
	return &streamSlots{max: max, total: DefaultMaxStreams, held: map[string]int{}}
}

// limit sets the bounds (<= 0 leaves one as it is); streams already open
// keep their slots.
func (s *streamSlots) limit(perCaller, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if perCaller > 0 {
		s.max = perCaller
	}
	if total > 0 {
		s.total = total
	}
}

// take holds one of key's slots, and returns the func that gives it back
// (once, whatever the number of calls), or which bound is reached.
func (s *streamSlots) take(key string) (func(), slotRefusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open >= s.total {
		return nil, replicaFull
	}
	if s.held[key] >= s.max {
		return nil, callerFull
	}
	s.held[key]++
	s.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.open--
			if s.held[key]--; s.held[key] <= 0 {
				delete(s.held, key)
			}
		})
	}, slotTaken
}

// slotRefusal is take's answer: taken, or the bound that is reached.
type slotRefusal int

const (
	slotTaken slotRefusal = iota
	callerFull
	replicaFull
)

// bounds are the per-caller and per-replica bounds now.
func (s *streamSlots) bounds() (perCaller, total int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.total
}

// LimitStreams bounds the streams (SSE and gRPC together) one caller may
// hold open on this replica, and all callers together; 0 leaves a bound as
// it is (Config.MaxStreamsPerCaller, DefaultMaxStreams).
func (e *Edge) LimitStreams(perCaller, total int) { e.streams.limit(perCaller, total) }

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
// ResourceExhausted when the caller or the replica holds as many as it
// may.
func (e *Edge) takeStream(rc rpcCall) (func(), *wire.Error) {
	release, why := e.streams.take(e.streamKey(rc))
	perCaller, total := e.streams.bounds()
	switch why {
	case callerFull:
		return nil, wire.ResourceExhausted(fmt.Sprintf("this caller already holds %d open streams here; end one before opening another", perCaller))
	case replicaFull:
		return nil, wire.ResourceExhausted(fmt.Sprintf("this replica already holds %d open streams, its bound; retry later or on another replica", total))
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
