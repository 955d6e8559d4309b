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
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/internal/litewitnesstest"

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
	bin := litewitnesstest.Bin(t)
	ctx := t.Context()
	lw := litewitnesstest.Start(t, bin, lwWitnessName)

	// The log: a checkpoint key whose name is the origin, as chio's are.
	skey, logVKey, err := note.GenerateKey(rand.Reader, lwOrigin)
	if err != nil {
		t.Fatal(err)
	}
	logSigner, _ := note.NewSigner(skey)
	logVerifier, _ := note.NewVerifier(logVKey)
	lw.AddLog(t, lwOrigin, logVKey)

	policy, err := ParsePolicy(strings.NewReader(fmt.Sprintf("witness lw %s http://%s\nquorum lw\n", lw.VKey, lw.Addr)))
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
		lw.VKey, lw.Addr, absentKey)))
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
