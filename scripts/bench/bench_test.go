package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestShort runs every section with small sizes so the harness cannot rot:
// each must finish and fill its tables. The figures are not judged.
func TestShort(t *testing.T) {
	if !testing.Short() {
		t.Skip("the harness's check runs with -short; the full run is go run -C scripts/bench .")
	}
	repo, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	env := &Env{Short: true, Rounds: 2, Repo: repo, Progress: testWriter{t}, builds: map[string]string{}, binDir: filepath.Join(root, "bin")}
	rep := &Report{Started: time.Now(), Short: true, Command: "go test -short", Machine: describeMachine(context.Background(), root)}
	for _, s := range sections() {
		t.Run(s.key, func(t *testing.T) {
			env.Dir = filepath.Join(root, s.key)
			if err := os.MkdirAll(env.Dir, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			sec, err := s.run(ctx, env)
			if err != nil {
				t.Fatal(err)
			}
			if len(sec.Tables) == 0 {
				t.Fatal("no tables")
			}
			for _, tb := range sec.Tables {
				if len(tb.Rows) == 0 {
					t.Fatalf("table %q has no rows", tb.Caption)
				}
				for _, row := range tb.Rows {
					if len(row) != len(tb.Header) {
						t.Fatalf("table %q: row %v does not fit header %v", tb.Caption, row, tb.Header)
					}
					for _, c := range row {
						if c == "" {
							t.Fatalf("table %q: empty cell in %v", tb.Caption, row)
						}
					}
				}
			}
			sec.Key, sec.Title = s.key, s.title
			rep.Sections = append(rep.Sections, sec)
			t.Log("\n" + sec.Text())
		})
	}
	md := rep.Markdown()
	for _, s := range rep.Sections {
		if !strings.Contains(md, "## "+s.Title) {
			t.Fatalf("report lacks section %q", s.Title)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestShortEdgeDPoP runs the edge section as -dpop does (a delegating
// capability, a fresh proof per request), so that mode cannot rot: every
// request must be accepted, or the section fails.
func TestShortEdgeDPoP(t *testing.T) {
	if !testing.Short() {
		t.Skip("the harness's check runs with -short")
	}
	repo, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	env := &Env{Short: true, DPoP: true, Rounds: 1, Repo: repo, Progress: testWriter{t}, builds: map[string]string{},
		binDir: filepath.Join(root, "bin"), Dir: filepath.Join(root, "edge")}
	if err := os.MkdirAll(env.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, s := range sections() {
		if s.key != "edge" {
			continue
		}
		sec, err := s.run(ctx, env)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(sec.Settings, "\n"), "DPoP") {
			t.Fatalf("the settings do not say the load proved possession: %v", sec.Settings)
		}
		return
	}
	t.Fatal("no edge section")
}
