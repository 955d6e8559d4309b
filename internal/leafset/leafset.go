// Package leafset keeps the RFC 6962 leaf hashes of the receipts a ledger
// in this process signed most recently, in a set of fixed capacity.
//
// It lets the projections of the same process skip re-verifying the
// Ed25519 signature of a receipt whose exact bytes this process signed:
// the hash is computed by the reader from the bytes it received, never
// taken from a message, so an outsider can put nothing in the set, and
// bytes that differ from a signed leaf hash differently and are verified
// as before. The set forgets the oldest hashes first; a hash forgotten
// costs one verification, never a wrong answer.
package leafset

import (
	"crypto/sha256"
	"fmt"
	"sync"
)

// LeafHash is the RFC 6962 leaf hash of a log entry: SHA-256(0x00 ‖ leaf).
func LeafHash(leaf []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(leaf)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// Set is a bounded set of leaf hashes, oldest out first. It is safe for
// concurrent use.
type Set struct {
	mu   sync.Mutex
	ring [][32]byte // insertion order; ring[next] is the oldest once full
	next int
	full bool
	in   map[[32]byte]struct{}
}

// New returns an empty set holding at most capacity hashes: about 100
// bytes of memory each (the ring's 32 and the map's entry).
func New(capacity int) (*Set, error) {
	if capacity < 1 {
		return nil, fmt.Errorf("leafset: capacity %d must be positive", capacity)
	}
	return &Set{ring: make([][32]byte, capacity), in: make(map[[32]byte]struct{}, capacity)}, nil
}

// Add records hashes, forgetting the oldest beyond the capacity. A hash
// already present is not added twice, so each one held has exactly one
// slot of the ring and leaves the map when that slot is reused.
func (s *Set) Add(hashes [][32]byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hashes {
		if _, ok := s.in[h]; ok {
			continue
		}
		if s.full {
			delete(s.in, s.ring[s.next])
		}
		s.ring[s.next] = h
		s.in[h] = struct{}{}
		if s.next++; s.next == len(s.ring) {
			s.next, s.full = 0, true
		}
	}
}

// Contains reports whether h is one of the hashes held.
func (s *Set) Contains(h [32]byte) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.in[h]
	return ok
}

// Len is the number of hashes held, never above the capacity.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.in)
}

// Cap is the capacity.
func (s *Set) Cap() int { return len(s.ring) }
