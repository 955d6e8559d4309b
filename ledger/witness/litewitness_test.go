package witness

// TestLitewitness runs the client, the cosignature verifier and a policy
// against litewitness, a real tlog-witness. It is skipped unless
// CHIO_LITEWITNESS names a litewitness binary. Setup on Debian, as root,
// from the repository root:
//
//	apt-get install -y sqlite3 openssh-client
//	GOBIN=/tmp/lw go install filippo.io/torchwood/cmd/litewitness@v0.6.1
//	CHIO_LITEWITNESS=/tmp/lw/litewitness go test -run TestLitewitness -v ./ledger/witness
//
// The test does the rest itself: it starts a private ssh-agent holding a
// fresh Ed25519 witness key (ssh-agent, ssh-keygen, ssh-add), starts
// litewitness on a loopback port with its database in a temporary
// directory, reads the witness's vkey from its index page, and registers
// the test log with sqlite3 as witnessctl add-log and add-key would: a log
// row at size 0 with the empty tree's hash and a key row with the log's
// checkpoint vkey.

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
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

	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"
)

const (
	lwWitnessName = "witness.chio.test/litewitness"
	lwOrigin      = "log.chio.test/litewitness-integration"
)

func TestLitewitness(t *testing.T) {
	bin := os.Getenv("CHIO_LITEWITNESS")
	if bin == "" {
		t.Skip("set CHIO_LITEWITNESS to a litewitness binary to run against a real witness; setup steps are at the top of litewitness_test.go")
	}
	for _, tool := range []string{bin, "ssh-agent", "ssh-keygen", "ssh-add", "sqlite3"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("CHIO_LITEWITNESS is set but %s is missing: %v", tool, err)
		}
	}
	ctx := t.Context()
	lw := startLitewitness(t, bin)

	// The log: a checkpoint key whose name is the origin, as chio's are.
	skey, logVKey, err := note.GenerateKey(rand.Reader, lwOrigin)
	if err != nil {
		t.Fatal(err)
	}
	logSigner, _ := note.NewSigner(skey)
	logVerifier, _ := note.NewVerifier(logVKey)
	lw.addLog(t, lwOrigin, logVKey)

	policy, err := ParsePolicy(strings.NewReader(fmt.Sprintf("witness lw %s http://%s\nquorum lw\n", lw.vkey, lw.addr)))
	if err != nil {
		t.Fatal(err)
	}
	client, err := NewClient(policy.Witnesses()[0])
	if err != nil {
		t.Fatal(err)
	}

	sign := func(tree *testonly.Tree, signer note.Signer) []byte {
		t.Helper()
		cp := log.Checkpoint{Origin: lwOrigin, Size: tree.Size(), Hash: tree.Hash()}
		signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, signer)
		if err != nil {
			t.Fatal(err)
		}
		return signed
	}
	consistency := func(tree *testonly.Tree, from uint64) [][]byte {
		t.Helper()
		if from == 0 {
			return nil
		}
		proof, err := tree.ConsistencyProof(from, tree.Size())
		if err != nil {
			t.Fatal(err)
		}
		return proof
	}
	grow := func(tree *testonly.Tree, to uint64, label string) {
		for tree.Size() < to {
			tree.AppendData(fmt.Appendf(nil, "%s leaf %d", label, tree.Size()))
		}
	}
	// cosign submits tree's checkpoint from old and checks that what comes
	// back is a cosignature from litewitness's key meeting the quorum.
	cosign := func(tree *testonly.Tree, old uint64) {
		t.Helper()
		checkpoint := sign(tree, logSigner)
		before := time.Now().Add(-2 * time.Second)
		cosigs, err := client.AddCheckpoint(ctx, old, consistency(tree, old), checkpoint)
		if err != nil {
			t.Fatalf("add-checkpoint %d → %d: %v", old, tree.Size(), err)
		}
		if !bytes.HasPrefix(cosigs, []byte("— "+lwWitnessName+" ")) || bytes.Count(cosigs, []byte("\n")) != 1 {
			t.Fatalf("cosignature lines %q", cosigs)
		}
		n, names, err := VerifyCheckpoint(append(checkpoint, cosigs...), logVerifier, policy)
		if err != nil || fmt.Sprint(names) != "[lw]" {
			t.Fatalf("verify cosigned checkpoint %d: %v %v", tree.Size(), names, err)
		}
		at := cosignatureTime(t, cosigs)
		if at.Before(before) || at.After(time.Now().Add(2*time.Second)) {
			t.Fatalf("cosignature time %v, want about now", at)
		}
		t.Logf("size %d from %d: cosigned at %v by %s; note signed by %d keys", tree.Size(), old, at.UTC(), names, len(n.Sigs))
	}

	honest := testonly.New(rfc6962.DefaultHasher)

	// 0 → 3 → 7, with real consistency proofs.
	grow(honest, 3, "honest")
	cosign(honest, 0)
	grow(honest, 7, "honest")
	cosign(honest, 3)

	// A stale old size is answered 409 with the witness's size, and the
	// submission succeeds when resent from that size.
	grow(honest, 9, "honest")
	_, err = client.AddCheckpoint(ctx, 3, consistency(honest, 3), sign(honest, logSigner))
	var conflict *SizeConflict
	if !errors.As(err, &conflict) || conflict.WitnessSize != 7 {
		t.Fatalf("resend from stale size 3: %v, want a size conflict at 7", err)
	}
	t.Logf("stale old size 3: %v", err)
	cosign(honest, conflict.WitnessSize)

	// A fork: the same key signs a tree sharing the first 5 leaves and
	// then diverging. At the size the witness holds, and grown past it
	// with the fork's own proof, it is refused as inconsistent (422).
	fork := testonly.New(rfc6962.DefaultHasher)
	for i := range uint64(5) {
		fork.Append(honest.LeafHash(i))
	}
	grow(fork, 11, "fork")
	forkAt9 := testonly.New(rfc6962.DefaultHasher)
	for i := range uint64(9) {
		forkAt9.Append(fork.LeafHash(i))
	}
	for _, tc := range []struct {
		name string
		tree *testonly.Tree
	}{
		{"fork at the witness's size", forkAt9},
		{"fork grown past it", fork},
	} {
		_, err := client.AddCheckpoint(ctx, 9, consistency(tc.tree, 9), sign(tc.tree, logSigner))
		var he *HTTPError
		if !errors.As(err, &he) || he.StatusCode != http.StatusUnprocessableEntity {
			t.Fatalf("%s: %v, want 422", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}

	// A checkpoint signed by a key the witness does not trust for the
	// origin is refused (403), however consistent.
	otherSkey, _, _ := note.GenerateKey(rand.Reader, lwOrigin)
	otherSigner, _ := note.NewSigner(otherSkey)
	grow(honest, 11, "honest")
	_, err = client.AddCheckpoint(ctx, 9, consistency(honest, 9), sign(honest, otherSigner))
	var he *HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusForbidden {
		t.Fatalf("untrusted log key: %v, want 403", err)
	}
	t.Logf("untrusted log key: %v", err)

	// The refusals left the witness's view intact: the honest log goes on.
	cosign(honest, 9)

	// A policy that also needs a witness which never cosigned is not met
	// by litewitness's cosignature alone.
	absentKey, _ := testVKey("witness.chio.test/absent", 42)
	strict, err := ParsePolicy(strings.NewReader(fmt.Sprintf(
		"witness lw %s http://%s\nwitness absent %s https://absent.invalid\ngroup both all lw absent\nquorum both\n",
		lw.vkey, lw.addr, absentKey)))
	if err != nil {
		t.Fatal(err)
	}
	grow(honest, 12, "honest")
	checkpoint := sign(honest, logSigner)
	cosigs, err := client.AddCheckpoint(ctx, 11, consistency(honest, 11), checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	_, names, err := VerifyCheckpoint(append(checkpoint, cosigs...), logVerifier, strict)
	if !errors.Is(err, ErrQuorum) || fmt.Sprint(names) != "[lw]" {
		t.Fatalf("strict policy: %v %v, want ErrQuorum with [lw]", names, err)
	}
	t.Logf("strict policy: %v", err)
}

type litewitness struct {
	addr string // host:port on loopback
	db   string
	vkey string
}

// startLitewitness runs litewitness with a fresh key in a private
// ssh-agent and returns once it serves its index page.
func startLitewitness(t *testing.T, bin string) *litewitness {
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

	lw := &litewitness{addr: "127.0.0.1:" + strconv.Itoa(freePort(t)), db: filepath.Join(dir, "litewitness.db")}
	logFile := filepath.Join(dir, "litewitness.log")
	out, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-name", lwWitnessName, "-db", lw.db, "-ssh-agent", sock, "-key", fingerprint, "-listen", lw.addr)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start litewitness: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); out.Close(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			logs, _ := os.ReadFile(logFile)
			t.Logf("litewitness output:\n%s", logs)
		}
	})

	var index string
	waitFor(t, "litewitness index page", func() bool {
		select {
		case <-exited:
			logs, _ := os.ReadFile(logFile)
			t.Fatalf("litewitness exited:\n%s", logs)
		default:
		}
		resp, err := http.Get("http://" + lw.addr + "/")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponse))
		index = string(b)
		return resp.StatusCode == http.StatusOK
	})

	// The index page shows the witness's vkey on a line of its own; it
	// must be the cosignature/v1 vkey of the key we put in the agent.
	sc := bufio.NewScanner(strings.NewReader(index))
	for sc.Scan() {
		if line := html.UnescapeString(strings.TrimSpace(sc.Text())); strings.HasPrefix(line, lwWitnessName+"+") {
			lw.vkey = line
		}
	}
	typed := append([]byte{0x04}, pub...)
	sum := sha256.Sum256(append([]byte(lwWitnessName+"\n"), typed...))
	want := fmt.Sprintf("%s+%08x+%s", lwWitnessName, binary.BigEndian.Uint32(sum[:4]), base64.StdEncoding.EncodeToString(typed))
	if lw.vkey != want {
		t.Fatalf("litewitness index shows vkey %q, want %q; page:\n%s", lw.vkey, want, index)
	}
	t.Logf("litewitness at %s with vkey %s", lw.addr, lw.vkey)
	return lw
}

// addLog registers a log at size 0 and its checkpoint key, as witnessctl
// add-log and add-key do, in the tables litewitness created at start.
func (lw *litewitness) addLog(t *testing.T, origin, vkey string) {
	t.Helper()
	q := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	empty := rfc6962.DefaultHasher.EmptyRoot()
	run(t, nil, "sqlite3", lw.db, fmt.Sprintf(
		"INSERT INTO log (origin, tree_size, tree_hash) VALUES (%s, 0, %s); INSERT INTO key (origin, key) VALUES (%s, %s);",
		q(origin), q(base64.StdEncoding.EncodeToString(empty)), q(origin), q(vkey)))
}

// readSSHEd25519 reads an OpenSSH public key file and returns the Ed25519
// key and the wire-format blob its fingerprint hashes.
func readSSHEd25519(t *testing.T, path string) (ed25519.PublicKey, []byte) {
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

// cosignatureTime reads the timestamp of a single cosignature line.
func cosignatureTime(t *testing.T, line []byte) time.Time {
	t.Helper()
	f := strings.Fields(string(line))
	raw, err := base64.StdEncoding.DecodeString(f[len(f)-1])
	if err != nil || len(raw) != 4+cosignatureSize {
		t.Fatalf("cosignature line %q: %v", line, err)
	}
	return time.Unix(int64(binary.BigEndian.Uint64(raw[4:])), 0)
}

func run(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
