package leafset

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
)

func hashOf(i int) [32]byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(i))
	return LeafHash(b[:])
}

func TestLeafHashIsRFC6962(t *testing.T) {
	leaf := []byte(`{"id":"r1"}`)
	got := LeafHash(leaf)
	if want := rfc6962.DefaultHasher.HashLeaf(leaf); string(got[:]) != string(want) {
		t.Fatalf("LeafHash %x, RFC 6962 %x", got, want)
	}
	if plain := sha256.Sum256(leaf); got == plain {
		t.Fatal("LeafHash is the plain SHA-256: the 0x00 prefix is missing")
	}
}

// The set never holds more than its capacity, forgets the oldest first,
// and a repeated hash takes no second slot.
func TestSetStaysBounded(t *testing.T) {
	s, err := New(100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10_000 {
		s.Add([][32]byte{hashOf(i), hashOf(i)})
		if s.Len() > s.Cap() {
			t.Fatalf("after %d adds the set holds %d, capacity %d", i+1, s.Len(), s.Cap())
		}
	}
	if s.Len() != 100 {
		t.Fatalf("holds %d, want 100", s.Len())
	}
	for i := range 10_000 {
		if want := i >= 9_900; s.Contains(hashOf(i)) != want {
			t.Fatalf("Contains(%d) = %v, want %v", i, !want, want)
		}
	}
	if len(s.in) != len(s.ring) {
		t.Fatalf("map %d entries, ring %d", len(s.in), len(s.ring))
	}
	if _, err := New(0); err == nil {
		t.Fatal("New(0) accepted")
	}
}

func BenchmarkLeafHash(b *testing.B) {
	leaf := make([]byte, 1234)
	b.SetBytes(int64(len(leaf)))
	for b.Loop() {
		LeafHash(leaf)
	}
}
