package evidence

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chio-ledger/chio/internal/stagedir"
)

// TestExportProgressInterruptAndRerun interrupts an export from its
// progress callback, then exports again into the same directory: the
// interrupted one leaves nothing at the directory, the rerun clears what
// a killed one left beside it, reports every receipt, and its package
// verifies; a finished package is never overwritten.
func TestExportProgressInterruptAndRerun(t *testing.T) {
	l := newTestLog(t, 30)
	dir := filepath.Join(t.TempDir(), "pkg")
	// export exports into dir, cancelling after cancelAt receipts (0: never).
	export := func(cancelAt uint64) ([][2]uint64, error) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var seen [][2]uint64
		_, err := Export(ctx, &Client{Base: l.url, Token: "op"}, dir, Options{PageSize: 4, Logger: slog.New(slog.DiscardHandler),
			Progress: func(done, total uint64) {
				seen = append(seen, [2]uint64{done, total})
				if cancelAt != 0 && done == cancelAt {
					cancel()
				}
			}})
		return seen, err
	}
	absent := func(what, path string) {
		t.Helper()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%s: %s exists (%v)", what, path, err)
		}
	}

	seen, err := export(10)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted export: %v, want context.Canceled", err)
	}
	if last := seen[len(seen)-1]; last != [2]uint64{10, 30} {
		t.Fatalf("progress went on to %v after the cancel at 10 of 30", last)
	}
	absent("after an interrupted export", dir)
	staged := func() []string {
		found, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".staged-*"))
		return found
	}
	if left := staged(); len(left) != 0 {
		t.Fatalf("after an interrupted export: %v left", left)
	}

	// What a killed export leaves: a partial package beside dir.
	killed, err := stagedir.New(dir, stagedir.Options{Unmarked: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed.Path, ReceiptsFile), []byte("half a line"), 0o644); err != nil {
		t.Fatal(err)
	}
	seen, err = export(0)
	if err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if len(seen) != 31 || seen[0] != [2]uint64{0, 30} || seen[30] != [2]uint64{30, 30} {
		t.Fatalf("%d progress calls from %v to %v, want 31 from 0 to 30 of 30", len(seen), seen[0], seen[len(seen)-1])
	}
	if left := staged(); len(left) != 0 {
		t.Fatalf("after a finished export: %v left", left)
	}
	rep, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel})
	if err != nil || rep.Receipts != 30 {
		t.Fatalf("verify the rerun's package: %+v %v", rep, err)
	}

	if _, err := export(0); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("export over a finished package: %v", err)
	}
	if rep, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel}); err != nil || rep.Receipts != 30 {
		t.Fatalf("the finished package after a refused export: %+v %v", rep, err)
	}
}
