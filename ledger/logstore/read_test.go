package logstore

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/transparency-dev/merkle/rfc6962"
)

// hashRow must agree with the RFC 6962 hasher for every row width a tile
// node can span, and leave its input row untouched.
func TestHashRowMatchesRFC6962(t *testing.T) {
	var scratch [TileWidth * HashSize]byte
	for n := 1; n <= TileWidth; n *= 2 {
		row := make([]byte, n*HashSize)
		if _, err := rand.Read(row); err != nil {
			t.Fatal(err)
		}
		orig := bytes.Clone(row)
		level := make([][]byte, n)
		for i := range level {
			level[i] = row[i*HashSize : (i+1)*HashSize]
		}
		for len(level) > 1 {
			next := make([][]byte, len(level)/2)
			for i := range next {
				next[i] = rfc6962.DefaultHasher.HashChildren(level[2*i], level[2*i+1])
			}
			level = next
		}
		got := hashRow(scratch[:n*HashSize], row)
		if !bytes.Equal(got, level[0]) {
			t.Fatalf("width %d: hashRow %x, RFC 6962 %x", n, got, level[0])
		}
		if !bytes.Equal(row, orig) {
			t.Fatalf("width %d: hashRow changed its input", n)
		}
		scratch[0] ^= 0xff // the result must not alias the scratch buffer
		if !bytes.Equal(got, level[0]) {
			t.Fatalf("width %d: result aliases the scratch buffer", n)
		}
	}
}
