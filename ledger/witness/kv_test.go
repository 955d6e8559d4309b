package witness

import (
	"crypto/rand"
	"testing"

	"github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natstest"
)

// The bucket only moves forward: a replica's slower round, with a smaller
// checkpoint, never replaces a larger one.
func TestKVMovesForward(t *testing.T) {
	_, _, js := natstest.Start(t)
	kv, err := OpenKV(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	skey, _, err := note.GenerateKey(rand.Reader, "kv.chio.test/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	at := func(size uint64) []byte {
		signed, err := note.Sign(&note.Note{Text: string(log.Checkpoint{Origin: "kv.chio.test/log", Size: size, Hash: make([]byte, 32)}.Marshal())}, signer)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	if got, err := kv.Get(t.Context()); got != nil || err != nil {
		t.Fatalf("empty bucket: %q %v", got, err)
	}
	for _, step := range []struct {
		put, want uint64
	}{{5, 5}, {9, 9}, {7, 9}, {9, 9}, {12, 12}} {
		if err := kv.Put(t.Context(), at(step.put)); err != nil {
			t.Fatal(err)
		}
		got, err := kv.Get(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if size, _ := noteSize(got); size != step.want {
			t.Fatalf("after putting %d: holds %d, want %d", step.put, size, step.want)
		}
	}
	if err := kv.Put(t.Context(), []byte("not a note")); err == nil {
		t.Fatal("stored something that is not a checkpoint")
	}
}
