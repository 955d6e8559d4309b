package mcpbridge

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/edges/mcpbridge/mcpbridgetest"
)

// A command that starts children of its own (a shell wrapper, npx) takes
// them down with it: Close kills its process group.
func TestCloseKillsGrandchildren(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `sleep 300 </dev/null >/dev/null 2>&1 & echo $! > "$2"; exec "$0" "$1"`
	s, err := New(context.Background(), "files", Upstream{Command: []string{"/bin/sh", "-c", script, os.Args[0], mcpbridgetest.StdioFlag, pidFile}}, fast)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	if !alive(pid) {
		s.Close()
		t.Fatalf("the grandchild %d is not running before Close", pid)
	}
	s.Close()
	for range 100 {
		if !alive(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the grandchild %d outlived Close", pid)
}

// alive reports whether pid runs: it exists and is not a zombie (nobody
// may reap it in a container without an init).
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(strings.TrimSpace(string(stat[i+1:])), "Z")
}
