package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

// child is a server run as its own process, so that it never shares the
// load generator's runtime; its output goes to a log file in env.Dir.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error, valid after done
}

// startChild starts bin with args and waits until a line of its output
// matches ready; it returns the matches of ready's groups.
func startChild(ctx context.Context, env *Env, name string, ready *regexp.Regexp, timeout time.Duration, bin string, args ...string) (*child, []string, error) {
	return startChildEnv(ctx, env, name, nil, ready, timeout, bin, args...)
}

// startChildEnv is startChild with extra environment variables
// (NAME=VALUE, over the harness's own).
func startChildEnv(ctx context.Context, env *Env, name string, vars []string, ready *regexp.Regexp, timeout time.Duration, bin string, args ...string) (*child, []string, error) {
	logPath := filepath.Join(env.Dir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("%s log: %w", name, err)
	}
	// The log is appended to across restarts: only what this start
	// writes can say it is ready.
	from := int64(0)
	if fi, err := f.Stat(); err == nil {
		from = fi.Size()
	}
	// Not CommandContext: that would SIGKILL on cancel; stop ends it
	// gracefully instead.
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = env.Dir
	if len(vars) > 0 {
		cmd.Env = append(os.Environ(), vars...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("start %s: %w", name, err)
	}
	f.Close() // the child holds its own descriptor
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if b, err := os.ReadFile(logPath); err == nil && int64(len(b)) >= from {
			if m := ready.FindSubmatch(b[from:]); m != nil {
				out := make([]string, len(m)-1)
				for i := range out {
					out[i] = string(m[i+1])
				}
				return c, out, nil
			}
		}
		select {
		case <-ctx.Done():
			c.stop()
			return nil, nil, ctx.Err()
		case <-c.done:
			return nil, nil, fmt.Errorf("%s exited before it was ready (%v):\n%s", name, c.err, c.tail())
		case <-deadline.C:
			c.stop()
			return nil, nil, fmt.Errorf("%s not ready after %s:\n%s", name, timeout, c.tail())
		case <-tick.C:
		}
	}
}

// alive reports whether the process still runs.
func (c *child) alive() error {
	select {
	case <-c.done:
		return fmt.Errorf("%s exited (%v):\n%s", c.name, c.err, c.tail())
	default:
		return nil
	}
}

// stop sends SIGTERM, then SIGKILL after 10 s, to the child's process
// group; it returns once the process has exited. Safe to call twice.
func (c *child) stop() {
	select {
	case <-c.done:
		return
	default:
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}

// tail is the end of the child's log, for error messages.
func (c *child) tail() string { return tailFile(c.log, 20) }

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			if n--; n == 0 {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}
