// Package stagedir builds a directory beside its target and renames it
// into place only when it is complete, so that a target never appears
// half-built and an interrupted build leaves nothing a rerun trips on.
//
// Everything this package creates holds a marker file, and it removes
// nothing that does not: a user's own directory that happens to sit where
// a leftover would (a backup named log.old, say) is never touched, and
// Replace only replaces a target an earlier staged build produced.
package stagedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Marker is the file that marks a directory as made by this package.
const Marker = ".chio-staged"

// Options says what New may do to an existing target.
type Options struct {
	// Replace lets Commit replace a target an earlier staged build left
	// (one holding the marker). A target without the marker is refused
	// whatever Replace says.
	Replace bool
	// Unmarked removes the marker before the rename, for a target whose
	// contents are checked file by file (an evidence package). Such a
	// target can never be replaced.
	Unmarked bool
	// What names the target in messages ("rebuild", "package").
	What string
	// InUse, when set, is asked before a target is replaced whether a
	// running process holds it (a store's lock); an error refuses.
	InUse func(dir string) error
}

// Dir is one staged build: Path is where to build; Commit moves it to
// Target.
type Dir struct {
	Target, Path string
	opts         Options
}

// New refuses a target it may not replace, removes what interrupted
// builds of the same target left, and creates an empty staging
// directory beside the target.
func New(target string, opts Options) (*Dir, error) {
	target = filepath.Clean(target)
	if opts.What == "" {
		opts.What = "build"
	}
	if err := checkTarget(target, opts); err != nil {
		return nil, err
	}
	parent, base := filepath.Split(target)
	if parent == "" {
		parent = "."
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", parent, err)
	}
	if err := removeLeftovers(parent, base); err != nil {
		return nil, err
	}
	path, err := os.MkdirTemp(parent, "."+base+".staged-*")
	if err != nil {
		return nil, fmt.Errorf("create the staging directory of %s: %w", target, err)
	}
	if err := mark(path); err != nil {
		return nil, errors.Join(err, os.RemoveAll(path))
	}
	return &Dir{Target: target, Path: path, opts: opts}, nil
}

// checkTarget refuses a symlink, a target that holds anything this
// package did not make, and a finished build unless Replace.
func checkTarget(target string, opts Options) error {
	fi, err := os.Lstat(target)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", target, err)
	case fi.Mode()&os.ModeSymlink != 0:
		return fmt.Errorf("%s is a symbolic link: give the directory it points to", target)
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", target)
	}
	entries, err := os.ReadDir(target)
	if err != nil {
		return fmt.Errorf("read %s: %w", target, err)
	}
	switch {
	case len(entries) == 0:
		return nil
	case opts.Unmarked:
		return fmt.Errorf("%s already exists: choose a new directory (a finished %s is never overwritten)", target, opts.What)
	case !marked(target):
		return fmt.Errorf("%s holds files this command did not write (a live store?): not replaced; choose a new directory", target)
	case !opts.Replace:
		return fmt.Errorf("%s holds a finished %s: pass --force to replace it once the new one is complete, or choose a new directory", target, opts.What)
	}
	return nil
}

// removeLeftovers removes the staging and set-aside directories that
// interrupted builds of base left in parent: only marked ones.
func removeLeftovers(parent, base string) error {
	for _, kind := range []string{".staged-", ".replaced-"} {
		found, err := filepath.Glob(filepath.Join(parent, "."+globEscape(base)+kind+"*"))
		if err != nil {
			return fmt.Errorf("find leftovers of %s: %w", base, err)
		}
		for _, p := range found {
			if !marked(p) {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove %s, left by an interrupted run: %w", p, err)
			}
		}
	}
	return nil
}

// Commit renames the complete build into place, setting a replaced
// target aside first and removing it after, and syncs the parent so the
// rename survives a crash.
func (d *Dir) Commit() error {
	if d.opts.Unmarked {
		if err := os.Remove(filepath.Join(d.Path, Marker)); err != nil {
			return fmt.Errorf("unmark %s: %w", d.Path, err)
		}
	}
	// Checked again: the target may have appeared while this one was built.
	if err := checkTarget(d.Target, d.opts); err != nil {
		return err
	}
	parent := filepath.Dir(d.Target)
	var aside string
	if entries, err := os.ReadDir(d.Target); err == nil && len(entries) == 0 {
		if err := os.Remove(d.Target); err != nil { // an empty target is as good as none
			return fmt.Errorf("replace the empty %s: %w", d.Target, err)
		}
	} else if err == nil {
		if d.opts.InUse != nil {
			if err := d.opts.InUse(d.Target); err != nil {
				return fmt.Errorf("%s is in use by a running process: not replaced: %w", d.Target, err)
			}
		}
		// The target is a marked build (checkTarget). It is moved into a
		// marked directory of ours, so that a crash before its removal
		// leaves a leftover the next run removes.
		if aside, err = os.MkdirTemp(parent, "."+filepath.Base(d.Target)+".replaced-*"); err != nil {
			return fmt.Errorf("set %s aside: %w", d.Target, err)
		}
		if err := mark(aside); err != nil {
			return errors.Join(err, os.RemoveAll(aside))
		}
		if err := os.Rename(d.Target, filepath.Join(aside, "old")); err != nil {
			return errors.Join(fmt.Errorf("set %s aside: %w", d.Target, err), os.RemoveAll(aside))
		}
	}
	if err := os.Rename(d.Path, d.Target); err != nil {
		return fmt.Errorf("move the %s into place: %w", d.opts.What, err)
	}
	if aside != "" {
		if err := os.RemoveAll(aside); err != nil {
			return fmt.Errorf("remove the replaced %s: %w", d.opts.What, err)
		}
	}
	return syncDir(parent)
}

// Discard removes the staging directory of a build that failed or was
// stopped (the next New would too: this frees the space now).
func (d *Dir) Discard() error {
	if err := os.RemoveAll(d.Path); err != nil {
		return fmt.Errorf("remove the unfinished %s: %w", d.opts.What, err)
	}
	return nil
}

func mark(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, Marker), []byte("made by chio: a staged build\n"), 0o600); err != nil {
		return fmt.Errorf("mark %s: %w", dir, err)
	}
	return nil
}

func marked(dir string) bool {
	fi, err := os.Lstat(filepath.Join(dir, Marker))
	return err == nil && fi.Mode().IsRegular()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(s)
}
