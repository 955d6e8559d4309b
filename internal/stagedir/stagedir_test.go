package stagedir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// build stages target, writes one file and commits it.
func build(t *testing.T, target, content string, opts Options) error {
	t.Helper()
	d, err := New(target, opts)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d.Path, "data"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return d.Commit()
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestNewAndCommit(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(t *testing.T, target string)
		opts    Options
		wantErr string // "" = committed
		want    string // the target's data after
	}{
		{name: "new target", prepare: func(*testing.T, string) {}, want: "new"},
		{name: "empty directory", prepare: func(t *testing.T, target string) { mkdir(t, target) }, want: "new"},
		{name: "finished build, no replace", prepare: func(t *testing.T, target string) {
			if err := build(t, target, "old", Options{}); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "holds a finished build", want: "old"},
		{name: "finished build, replace", prepare: func(t *testing.T, target string) {
			if err := build(t, target, "old", Options{}); err != nil {
				t.Fatal(err)
			}
		}, opts: Options{Replace: true}, want: "new"},
		{name: "someone else's directory, replace", prepare: func(t *testing.T, target string) {
			mkdir(t, target)
			write(t, filepath.Join(target, "data"), "theirs")
		}, opts: Options{Replace: true}, wantErr: "did not write", want: "theirs"},
		{name: "a store in use", prepare: func(t *testing.T, target string) {
			if err := build(t, target, "old", Options{}); err != nil {
				t.Fatal(err)
			}
		}, opts: Options{Replace: true, InUse: func(string) error { return errors.New("locked") }}, wantErr: "in use", want: "old"},
		{name: "unmarked target exists", prepare: func(t *testing.T, target string) {
			if err := build(t, target, "old", Options{Unmarked: true}); err != nil {
				t.Fatal(err)
			}
		}, opts: Options{Unmarked: true, Replace: true}, wantErr: "already exists", want: "old"},
		{name: "symlink", prepare: func(t *testing.T, target string) {
			other := target + "-real"
			mkdir(t, other)
			if err := os.Symlink(other, target); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "symbolic link"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(t.TempDir(), "log")
			c.prepare(t, target)
			err := build(t, target, "new", c.opts)
			if c.wantErr == "" && err != nil || c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)) {
				t.Fatalf("err %v, want %q", err, c.wantErr)
			}
			if c.want != "" {
				if got := read(t, filepath.Join(target, "data")); got != c.want {
					t.Errorf("target holds %q, want %q", got, c.want)
				}
			}
			if _, err := os.Stat(filepath.Join(target, Marker)); c.opts.Unmarked && c.wantErr == "" && err == nil {
				t.Error("an unmarked build kept its marker")
			}
			// Nothing is left beside the target but what the case made.
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(target), ".log.*"))
			if len(left) != 0 && c.wantErr == "" {
				t.Errorf("left behind: %v", left)
			}
		})
	}
}

// TestLeftovers: an interrupted build's directories are removed by the
// next run; a user's directory that looks like one is not.
func TestLeftovers(t *testing.T) {
	parent := t.TempDir()
	target := filepath.Join(parent, "log")
	d, err := New(target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(d.Path, "data"), "half") // interrupted: no Commit
	theirs := filepath.Join(parent, ".log.staged-mine")
	mkdir(t, theirs)
	write(t, filepath.Join(theirs, "data"), "keep")
	backup := filepath.Join(parent, "log.old")
	mkdir(t, backup)
	write(t, filepath.Join(backup, "data"), "backup")

	if err := build(t, target, "new", Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the interrupted build's directory is still there: %v", err)
	}
	if read(t, filepath.Join(theirs, "data")) != "keep" || read(t, filepath.Join(backup, "data")) != "backup" {
		t.Error("a directory this package did not make was changed")
	}
	if got := read(t, filepath.Join(target, "data")); got != "new" {
		t.Errorf("target %q", got)
	}
}

func TestDiscard(t *testing.T) {
	target := filepath.Join(t.TempDir(), "log")
	d, err := New(target, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(d.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("discarded directory still there: %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("discard made the target: %v", err)
	}
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
