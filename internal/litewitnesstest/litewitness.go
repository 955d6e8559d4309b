// Package litewitnesstest runs litewitness, a C2SP tlog-witness this
// project did not write, for tests: its key in a private ssh-agent, its
// state in SQLite, a log registered with the sqlite3 CLI as witnessctl
// would (witnessctl does not build here). Tests that use it are skipped
// unless CHIO_LITEWITNESS names the binary. Setup on Debian:
//
//	apt-get install -y sqlite3 openssh-client
//	GOBIN=/tmp/lw go install filippo.io/torchwood/cmd/litewitness@v0.6.1
//	export CHIO_LITEWITNESS=/tmp/lw/litewitness
package litewitnesstest

import (
	"bufio"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"
)

// Bin is the litewitness binary CHIO_LITEWITNESS names; without it the
// test is skipped. The tools it needs must be installed.
func Bin(t testing.TB) string {
	t.Helper()
	bin := os.Getenv("CHIO_LITEWITNESS")
	if bin == "" {
		t.Skip("set CHIO_LITEWITNESS to a litewitness binary to run against a real witness (see package litewitnesstest)")
	}
	for _, tool := range []string{bin, "ssh-agent", "ssh-keygen", "ssh-add", "sqlite3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("CHIO_LITEWITNESS is set but %s is missing: %v", tool, err)
		}
	}
	return bin
}

// Witness is a running litewitness.
type Witness struct {
	Addr string // host:port on loopback
	VKey string // its cosignature/v1 verifier key
	db   string

	bin, logFile string
	args         []string
	cmd          *exec.Cmd
	exited       chan struct{}
}

// start runs the process and returns its index page once it serves it.
func (lw *Witness) start(t testing.TB) string {
	t.Helper()
	out, err := os.OpenFile(lw.logFile, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lw.bin, lw.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start litewitness: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	lw.cmd, lw.exited = cmd, exited
	var index string
	waitFor(t, "litewitness index page", func() bool {
		select {
		case <-exited:
			logs, _ := os.ReadFile(lw.logFile)
			t.Fatalf("litewitness exited:\n%s", logs)
		default:
		}
		resp, err := http.Get("http://" + lw.Addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		index = string(b)
		return resp.StatusCode == http.StatusOK
	})
	return index
}

// Stop stops the witness (its state stays, for Restart).
func (lw *Witness) Stop() {
	if lw.cmd == nil {
		return
	}
	lw.cmd.Process.Signal(os.Interrupt)
	select {
	case <-lw.exited:
	case <-time.After(10 * time.Second):
		lw.cmd.Process.Kill()
		<-lw.exited
	}
	lw.cmd = nil
}

// Restart starts a stopped witness again, on the same address and state.
func (lw *Witness) Restart(t testing.TB) {
	t.Helper()
	lw.start(t)
}

// Start runs litewitness (bin) named name, with a fresh key in a private
// ssh-agent, and returns once it serves its index page. Everything stops
// at the test's cleanup.
func Start(t testing.TB, bin, name string) *Witness {
	t.Helper()
	dir := t.TempDir()
	// A unix socket path must stay short (about 100 bytes), which a
	// nested test temp dir may not.
	sockDir, err := os.MkdirTemp("", "chio-lw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "agent.sock")

	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	agent.Stdout, agent.Stderr = io.Discard, io.Discard
	if err := agent.Start(); err != nil {
		t.Fatalf("start ssh-agent: %v", err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	waitFor(t, "ssh-agent socket", func() bool { _, err := os.Stat(sock); return err == nil })

	key := filepath.Join(dir, "witness_key")
	run(t, nil, "ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "chio-witness-test", "-f", key)
	run(t, []string{"SSH_AUTH_SOCK=" + sock}, "ssh-add", "-q", key)
	pub, blob := readSSHEd25519(t, key+".pub")
	fp := sha256.Sum256(blob)
	fingerprint := "SHA256:" + base64.RawStdEncoding.EncodeToString(fp[:])

	lw := &Witness{Addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), db: filepath.Join(dir, "litewitness.db")}
	lw.args = []string{"-name", name, "-db", lw.db, "-ssh-agent", sock, "-key", fingerprint, "-listen", lw.Addr}
	lw.bin, lw.logFile = bin, filepath.Join(dir, "litewitness.log")
	index := lw.start(t)
	t.Cleanup(func() {
		lw.Stop()
		if t.Failed() {
			logs, _ := os.ReadFile(lw.logFile)
			t.Logf("litewitness output:\n%s", logs)
		}
	})

	// The index page shows the witness's vkey on a line of its own; it
	// must be the cosignature/v1 vkey of the key we put in the agent.
	sc := bufio.NewScanner(strings.NewReader(index))
	for sc.Scan() {
		if line := html.UnescapeString(strings.TrimSpace(sc.Text())); strings.HasPrefix(line, name+"+") {
			lw.VKey = line
		}
	}
	typed := append([]byte{0x04}, pub...)
	sum := sha256.Sum256(append([]byte(name+"\n"), typed...))
	want := fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(sum[:4]), base64.StdEncoding.EncodeToString(typed))
	if lw.VKey != want {
		t.Fatalf("litewitness index shows vkey %q, want %q; page:\n%s", lw.VKey, want, index)
	}
	t.Logf("litewitness at %s with vkey %s", lw.Addr, lw.VKey)
	return lw
}

// AddLog registers a log at size 0 and its checkpoint key, as witnessctl
// add-log and add-key do, in the tables litewitness created at start.
func (lw *Witness) AddLog(t testing.TB, origin, vkey string) {
	t.Helper()
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	empty := rfc6962.DefaultHasher.EmptyRoot()
	run(t, nil, "sqlite3", lw.db, fmt.Sprintf(
		"INSERT INTO log (origin, tree_size, tree_hash) VALUES (%s, 0, %s); INSERT INTO key (origin, key) VALUES (%s, %s);",
		q(origin), q(base64.StdEncoding.EncodeToString(empty)), q(origin), q(vkey)))
}

// readSSHEd25519 reads an OpenSSH public key file and returns the Ed25519
// key and the wire-format blob its fingerprint hashes.
func readSSHEd25519(t testing.TB, path string) (ed25519.PublicKey, []byte) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) < 2 || f[0] != "ssh-ed25519" {
		t.Fatalf("%s: not an ssh-ed25519 public key: %q", path, b)
	}
	blob, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	// string "ssh-ed25519", then string key: each a uint32 length and bytes.
	rest := blob
	var fields [][]byte
	for len(rest) >= 4 {
		n := binary.BigEndian.Uint32(rest)
		if uint64(len(rest)-4) < uint64(n) {
			break
		}
		fields, rest = append(fields, rest[4:4+n]), rest[4+n:]
	}
	if len(fields) != 2 || string(fields[0]) != "ssh-ed25519" || len(fields[1]) != ed25519.PublicKeySize || len(rest) != 0 {
		t.Fatalf("%s: malformed ssh-ed25519 key blob", path)
	}
	return ed25519.PublicKey(fields[1]), blob
}

func run(t testing.TB, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t testing.TB, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
