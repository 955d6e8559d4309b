// Package diskspace measures the free space of the filesystem a store
// lives on, so that a store can refuse a write while space is short
// instead of letting its storage engine meet ENOSPC halfway through one
// (Pebble treats a failed WAL or MANIFEST write as fatal; JetStream's file
// store keeps a failed write as a sticky error).
package diskspace

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
)

// Free returns the bytes an unprivileged writer may still use on the
// filesystem holding dir.
func Free(dir string) (uint64, error) {
	free, _, err := Stat(dir)
	return free, err
}

// Stat returns the free bytes (for an unprivileged writer) and the size
// of the filesystem holding dir.
func Stat(dir string) (free, total uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), st.Blocks * uint64(st.Bsize), nil
}

// Effective is the reserve a store keeps on a filesystem of total bytes:
// reserve, but never more than a quarter of the filesystem, so that a
// small one is not refused from the start.
func Effective(reserve, total uint64) uint64 { return min(reserve, total/4) }

// Error says a store is out of space: what it is, how much is free and how
// much it keeps in reserve. It matches syscall.ENOSPC with errors.Is.
type Error struct {
	Store   string // "log store", "projection store", …
	Free    uint64 // bytes free when last measured
	Reserve uint64 // bytes the store will not eat into
	Err     error  // the write's own error, when one failed; nil when refused beforehand
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("%s: no space left on device (%d bytes free, %d reserved)", e.Store, e.Free, e.Reserve)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Is makes errors.Is(err, syscall.ENOSPC) hold.
func (e *Error) Is(target error) bool { return target == syscall.ENOSPC }

// Unwrap returns the write's own error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Guard refuses writes to a store while its filesystem has less than
// Reserve bytes free (at most a quarter of the filesystem: Effective).
type Guard struct {
	Store   string // names the store in errors
	Dir     string
	Reserve uint64
}

// Check returns an *Error while fewer than Reserve bytes are free, the
// statfs error if free space cannot be measured, and nil otherwise.
func (g Guard) Check() error {
	free, total, err := Stat(g.Dir)
	if err != nil {
		return fmt.Errorf("%s: %w", g.Store, err)
	}
	if r := Effective(g.Reserve, total); free < r {
		return &Error{Store: g.Store, Free: free, Reserve: r}
	}
	return nil
}

// IsNoSpace reports whether err is, or wraps, a running-out-of-space error:
// ENOSPC from the kernel, an *Error, or a storage engine's error that only
// kept the message ("no space left on device").
func IsNoSpace(err error) bool {
	if err == nil {
		return false
	}
	var e *Error
	return errors.Is(err, syscall.ENOSPC) || errors.As(err, &e) || strings.Contains(err.Error(), "no space left on device")
}
