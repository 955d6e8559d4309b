// Package tmpfs gives fault tests a small filesystem of their own to fill:
// a tmpfs mounted for the test and unmounted when it ends. Mounting needs
// root, so the tests that use it run only with CHIO_FAULT_TEST=1.
package tmpfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// EnableVar is the environment variable that turns fault tests on.
const EnableVar = "CHIO_FAULT_TEST"

// Mount mounts a tmpfs of sizeMiB under a temporary directory and returns
// its path; it is unmounted when the test ends. The test is skipped unless
// CHIO_FAULT_TEST=1, and fails if it is set but the mount is impossible.
func Mount(t testing.TB, sizeMiB int) string {
	t.Helper()
	Enabled(t)
	dir := filepath.Join(t.TempDir(), "fs")
	MountAt(t, dir, sizeMiB)
	return dir
}

// Enabled skips the test unless CHIO_FAULT_TEST=1.
func Enabled(t testing.TB) {
	t.Helper()
	if os.Getenv(EnableVar) != "1" {
		t.Skipf("fault test: set %s=1 (needs root to mount a tmpfs)", EnableVar)
	}
}

// MountAt mounts a tmpfs of sizeMiB on dir (created if missing), as Mount
// does: a store's own directory inside a data dir, say.
func MountAt(t testing.TB, dir string, sizeMiB int) {
	t.Helper()
	Enabled(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%dm", sizeMiB)); err != nil {
		t.Fatalf("%s=1 but a tmpfs cannot be mounted on %s: %v", EnableVar, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// Filler is a file that takes a filesystem's free space.
type Filler struct {
	path string
	Size int64 // bytes it holds
}

// Fill writes a file in dir until the filesystem has no byte left.
func Fill(t testing.TB, dir string) *Filler {
	t.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for chunk := len(buf); chunk > 0; {
		w, err := f.Write(buf[:chunk])
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			chunk /= 2 // take the last pages too
			continue
		}
		if err != nil {
			t.Fatalf("fill %s: %v", dir, err)
		}
	}
	return &Filler{path: path, Size: n}
}

// Remove deletes the filler, giving its space back.
func (f *Filler) Remove(t testing.TB) {
	t.Helper()
	if err := os.Remove(f.path); err != nil {
		t.Fatalf("remove filler: %v", err)
	}
}
