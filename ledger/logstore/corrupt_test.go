package logstore

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 4 KiB overwritten inside an sstable: the reads that meet it fail
// (nothing wrong is served), the process does not panic (Pebble's default
// for a corruption), and the store says it is corrupt, naming the file.
func TestCorruptionFailsLoudlyNotFatally(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	const n = 4096
	leaf := fill(t, s, n, TileWidth)
	if err := s.cur.db.Flush(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	ssts, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
	if len(ssts) == 0 {
		t.Fatal("no sstable to damage")
	}
	f, err := os.OpenFile(ssts[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt(bytes.Repeat([]byte{0xAB}, 4096), st.Size()/2); err != nil {
		t.Fatal(err)
	}
	f.Close()

	s, err = Open(dir, WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Up to the first read that meets the damage: each such read costs
	// tens of milliseconds.
	bad := -1
	for i := range uint64(n) {
		e, err := s.Entry(i)
		if err != nil {
			bad = int(i)
			break
		}
		if !bytes.Equal(e, leaf) {
			t.Fatalf("entry %d served wrong", i)
		}
	}
	if bad < 0 {
		t.Fatal("no read met the damage")
	}
	if err := s.Corrupt(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Base(ssts[0])) {
		t.Fatalf("Corrupt() = %v", err)
	}
	t.Logf("entry %d of %d unreadable: %v", bad, n, s.Corrupt())
}
