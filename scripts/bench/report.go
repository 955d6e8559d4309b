package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is the whole run, as RESULTS.md records it.
type Report struct {
	Started  time.Time
	Short    bool
	Command  string
	Commit   string // the chio commit measured, "-dirty" if the tree had changes
	Machine  Machine
	Versions [][2]string
	Sections []*Section
}

// Machine is what the figures were measured on.
type Machine struct {
	CPU, Kernel, Memory, Disk, Go string
	Cores                         int
}

func describeMachine(ctx context.Context, dir string) Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH}
	m.CPU = firstField("/proc/cpuinfo", "model name")
	if kb := firstField("/proc/meminfo", "MemTotal"); kb != "" {
		m.Memory = kb
	}
	if b, err := exec.CommandContext(ctx, "uname", "-sr").Output(); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	// The filesystem the scratch directory is on: fsync costs are its own.
	if b, err := exec.CommandContext(ctx, "df", "-hT", dir).Output(); err == nil {
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if f := strings.Fields(lines[len(lines)-1]); len(f) >= 3 {
			m.Disk = fmt.Sprintf("%s on %s (%s)", f[1], f[0], f[2])
		}
	}
	return m
}

func firstField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (m Machine) Text() string {
	return fmt.Sprintf("machine: %s, %d cores, %s memory, %s; %s; scratch disk %s\n", m.CPU, m.Cores, m.Memory, m.Kernel, m.Go, m.Disk)
}

// moduleVersions lists the versions of the modules being compared, as
// this binary was built with them.
func moduleVersions() [][2]string {
	want := []string{
		"github.com/transparency-dev/tessera", "github.com/a2aproject/a2a-go/v2", "github.com/nats-io/nats-server/v2",
		"github.com/nats-io/nats.go", "github.com/cockroachdb/pebble/v2", "github.com/transparency-dev/merkle",
		"github.com/labstack/echo/v4",
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var out [][2]string
	for _, w := range want {
		for _, d := range bi.Deps {
			if d.Path == w {
				out = append(out, [2]string{w, d.Version})
			}
		}
	}
	return out
}

// Text renders a section for the terminal: aligned columns.
func (s *Section) Text() string {
	var b strings.Builder
	for _, st := range s.Settings {
		fmt.Fprintf(&b, "  setting: %s\n", st)
	}
	for _, t := range s.Tables {
		if t.Caption != "" {
			fmt.Fprintf(&b, "  %s\n", t.Caption)
		}
		width := make([]int, len(t.Header))
		for _, row := range append([][]string{t.Header}, t.Rows...) {
			for i, c := range row {
				if i < len(width) {
					width[i] = max(width[i], utf8.RuneCountInString(c))
				}
			}
		}
		for _, row := range append([][]string{t.Header}, t.Rows...) {
			b.WriteString("   ")
			for i, c := range row {
				if i < len(width) {
					fmt.Fprintf(&b, " %-*s", width[i], c)
				}
			}
			b.WriteString("\n")
		}
	}
	for _, f := range s.Findings {
		fmt.Fprintf(&b, "  - %s\n", f)
	}
	fmt.Fprintf(&b, "  (%s)\n", s.Elapsed.Round(time.Second))
	return b.String()
}

// Markdown renders the whole report.
func (r *Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmark results\n\n")
	b.WriteString("Measured by one run of `" + r.Command + "` (see `scripts/bench/main.go`); every figure below comes from that run, on this machine.\n")
	if r.Short {
		b.WriteString("\n**Short run: the sizes are too small for the figures to mean anything.**\n")
	}
	if r.Commit != "" {
		b.WriteString("\nChio commit measured: `" + r.Commit + "`.\n")
	}
	b.WriteString("\n## Machine\n\n")
	fmt.Fprintf(&b, "- date: %s\n- CPU: %s, %d cores\n- memory: %s\n- kernel: %s\n- Go: %s\n- scratch disk: %s\n",
		r.Started.UTC().Format("2006-01-02 15:04 MST"), r.Machine.CPU, r.Machine.Cores, r.Machine.Memory, r.Machine.Kernel, r.Machine.Go, r.Machine.Disk)
	if len(r.Versions) > 0 {
		b.WriteString("\n## Versions\n\n")
		for _, v := range r.Versions {
			fmt.Fprintf(&b, "- `%s` %s\n", v[0], v[1])
		}
	}
	for _, s := range r.Sections {
		fmt.Fprintf(&b, "\n## %s\n\n", s.Title)
		if len(s.Settings) > 0 {
			b.WriteString("Settings:\n\n")
			for _, st := range s.Settings {
				fmt.Fprintf(&b, "- %s\n", st)
			}
			b.WriteString("\n")
		}
		for _, t := range s.Tables {
			if t.Caption != "" {
				fmt.Fprintf(&b, "%s\n\n", t.Caption)
			}
			fmt.Fprintf(&b, "| %s |\n|%s\n", strings.Join(t.Header, " | "), strings.Repeat(" --- |", len(t.Header)))
			for _, row := range t.Rows {
				fmt.Fprintf(&b, "| %s |\n", strings.Join(row, " | "))
			}
			b.WriteString("\n")
		}
		for _, f := range s.Findings {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		fmt.Fprintf(&b, "\n(section took %s)\n", s.Elapsed.Round(time.Second))
	}
	return b.String()
}

// chioCommit names the commit of the code being measured, so that a
// figure can be traced to it; empty when git cannot tell.
func chioCommit(ctx context.Context, repo string) string {
	b, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return ""
	}
	c := strings.TrimSpace(string(b))
	if st, err := exec.CommandContext(ctx, "git", "-C", repo, "status", "--porcelain", "--", ".", ":!scripts/bench/RESULTS.md").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += "-dirty"
	}
	return c
}
