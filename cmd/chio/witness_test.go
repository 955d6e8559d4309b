package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/litewitnesstest"
	"github.com/chio-ledger/chio/internal/natsauth"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
)

const witnessedOrigin = "witnessed.chio.test/log"

// absentWitnessVKey is the cosignature/v1 verifier key of a witness that
// never cosigns: name+hash+base64(0x04 || Ed25519 public key).
func absentWitnessVKey(t *testing.T) string {
	t.Helper()
	pub, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	const name = "witness.chio.test/absent"
	typed := append([]byte{0x04}, pub...)
	sum := sha256.Sum256(append([]byte(name+"\n"), typed...))
	return fmt.Sprintf("%s+%08x+%s", name, binary.BigEndian.Uint32(sum[:4]), base64.StdEncoding.EncodeToString(typed))
}

// chio up with --witness-policy, against litewitness (a tlog-witness this
// project did not write): the checkpoint it serves is cosigned and meets
// the quorum (sumdb/note and the tlog-cosignature rules); with the witness
// down the log goes on, serving the last cosigned checkpoint and saying so
// in its metrics, and catches up when the witness is back; a forked ledger
// (the same key, another tree) is refused by the witness.
func TestUpCosignedByLitewitness(t *testing.T) {
	bin := litewitnesstest.Bin(t)
	lw := litewitnesstest.Start(t, bin, "witness.chio.test/lw")
	ctx := context.Background()

	keysDir := t.TempDir()
	if _, err := chio(ctx, "keygen", "--out", keysDir, "--origin", witnessedOrigin); err != nil {
		t.Fatal(err)
	}
	vkey, err := os.ReadFile(filepath.Join(keysDir, checkpointVKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	lw.AddLog(t, witnessedOrigin, strings.TrimSpace(string(vkey)))
	policyText := fmt.Sprintf("# the test's one witness\nwitness lw %s http://%s\nquorum lw\n", lw.VKey, lw.Addr)
	policyFile := filepath.Join(t.TempDir(), "witnesses.policy")
	if err := os.WriteFile(policyFile, []byte(policyText), 0o600); err != nil {
		t.Fatal(err)
	}
	policy, err := witness.ParsePolicy(strings.NewReader(policyText))
	if err != nil {
		t.Fatal(err)
	}
	logKey, err := note.NewVerifier(strings.TrimSpace(string(vkey)))
	if err != nil {
		t.Fatal(err)
	}
	lwKey := policy.Witnesses()[0].Verifier()

	up := startUp(t, "--keys", keysDir, "--origin", witnessedOrigin, "--witness-policy", policyFile, "--witness-interval", "100ms")
	js := upJetStream(t, up)
	calls := func(n int) {
		for range n {
			publishCall(t, js, upSigner(t, keysDir), schemas.VerdictAllow)
		}
	}
	// cosignedAt waits for /log/checkpoint to be cosigned at size ≥ min,
	// and checks it both ways: sumdb/note with the log's and the witness's
	// keys, and the policy's quorum.
	cosignedAt := func(base string, min uint64) uint64 {
		t.Helper()
		var size uint64
		waitUntil(t, fmt.Sprintf("a checkpoint of size ≥ %d cosigned", min), func() bool {
			_, cp := httpGet(t, base+"/log/checkpoint")
			n, err := note.Open(cp, note.VerifierList(logKey, lwKey))
			if err != nil || len(n.Sigs) != 2 {
				return false
			}
			if _, names, err := witness.VerifyCheckpoint(cp, logKey, policy); err != nil || fmt.Sprint(names) != "[lw]" {
				t.Fatalf("cosigned checkpoint fails the policy: %v %v\n%s", names, err, cp)
			}
			size, _ = strconv.ParseUint(strings.Split(n.Text, "\n")[1], 10, 64)
			return size >= min
		})
		return size
	}
	ids := []string{publishCall(t, js, upSigner(t, keysDir), schemas.VerdictAllow)}
	calls(2)
	first := cosignedAt(up.httpURL, 3)

	// chio verify --witness-policy: the receipt's tlog-proof carries the
	// cosigned checkpoint, which meets the quorum.
	_, tp := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[0]+"/tlog-proof")
	_, receipt := httpGetAs(t, up.token, up.httpURL+"/v1/receipts/"+ids[0])
	dir := t.TempDir()
	rf, pf := filepath.Join(dir, "r.json"), filepath.Join(dir, "p.tlog-proof")
	_ = os.WriteFile(rf, receipt, 0o600)
	_ = os.WriteFile(pf, tp, 0o600)
	kernel, _ := os.ReadFile(filepath.Join(keysDir, kernelPubFile))
	out, err := chio(ctx, "verify", "--receipt", rf, "--proof", pf, "--vkey", filepath.Join(keysDir, checkpointVKeyFile),
		"--kernel-key", strings.TrimSpace(string(kernel)), "--witness-policy", policyFile)
	if err != nil || !strings.Contains(out, "witnesses: quorum lw met, cosigned by lw") {
		t.Fatalf("verify --witness-policy: %v\n%s", err, out)
	}
	strict := filepath.Join(dir, "strict.policy")
	other, _ := os.ReadFile(policyFile)
	_ = os.WriteFile(strict, []byte(strings.Replace(string(other), "quorum lw", "witness absent "+absentWitnessVKey(t)+" https://absent.invalid\ngroup both all lw absent\nquorum both", 1)), 0o600)
	if out, err := chio(ctx, "verify", "--receipt", rf, "--proof", pf, "--vkey", filepath.Join(keysDir, checkpointVKeyFile),
		"--kernel-key", strings.TrimSpace(string(kernel)), "--witness-policy", strict); err == nil || !strings.Contains(err.Error(), "FAILED witnesses") {
		t.Fatalf("verify against a quorum not met: %v\n%s", err, out)
	}

	// The witness down: the log goes on; the checkpoint served stays the
	// one cosigned last, and the metrics say the quorum is not met.
	lw.Stop()
	calls(4)
	waitUntil(t, "the quorum reported unmet", func() bool {
		return metricOf(t, up.httpURL, `chio_ledger_witness_quorum_met`) == "0" &&
			metricOf(t, up.httpURL, `chio_ledger_tree_size`) == strconv.Itoa(int(first)+4)
	})
	if got := cosignedAt(up.httpURL, first); got != first {
		t.Fatalf("with the witness down, the served checkpoint moved to %d", got)
	}
	// Back: the log catches up.
	lw.Restart(t)
	cosignedAt(up.httpURL, first+4)
	// The kernel's statement of the latest tree head carries the cosigned
	// checkpoint beside it.
	var latest struct {
		Body                schemas.CheckpointBody `json:"body"`
		WitnessedCheckpoint string                 `json:"witnessed_checkpoint"`
	}
	waitUntil(t, "the witnessed checkpoint beside the statement", func() bool {
		_, raw := httpGet(t, up.httpURL+"/v1/checkpoints/latest")
		return json.Unmarshal(raw, &latest) == nil && latest.WitnessedCheckpoint != ""
	})
	if _, _, err := witness.VerifyCheckpoint([]byte(latest.WitnessedCheckpoint), logKey, policy); err != nil {
		t.Fatalf("witnessed_checkpoint: %v", err)
	}
	if metricOf(t, up.httpURL, `chio_ledger_witness_quorum_met`) != "1" {
		t.Error("quorum not reported met once the witness is back")
	}

	// A fork: another chio up with the same keys and another tree. The
	// witness refuses every checkpoint of it, so it serves its own alone.
	fork := startUp(t, "--keys", keysDir, "--origin", witnessedOrigin, "--witness-policy", policyFile, "--witness-interval", "100ms")
	forkJS := upJetStream(t, fork)
	for range 12 {
		publishCall(t, forkJS, upSigner(t, keysDir), schemas.VerdictDeny)
	}
	// Past the witness's size, the fork's tree is refused as inconsistent
	// with the one the witness cosigned (422), not merely behind it.
	waitUntil(t, "the fork's submissions refused", func() bool {
		return metricOf(t, fork.httpURL, `chio_ledger_witness_submissions_total{result="refused",witness="lw"}`) != ""
	})
	if _, cp := httpGet(t, fork.httpURL+"/log/checkpoint"); strings.Contains(string(cp), "— witness.chio.test/lw ") {
		t.Fatalf("the fork's checkpoint was cosigned:\n%s", cp)
	}
	if metricOf(t, fork.httpURL, `chio_ledger_witnessed_size`) != "0" {
		t.Error("the fork reports a cosigned size")
	}
	// The honest log is still cosigned as it grows.
	calls(2)
	cosignedAt(up.httpURL, first+6)
}

// upJetStream connects to chio up's NATS.
func upJetStream(t *testing.T, up *upProcess) jetstream.JetStream {
	t.Helper()
	nc := dialUp(t, up.natsURL, up.dir, natsauth.Edge)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// metricOf is the value of one series on base's /metrics ("" if absent).
func metricOf(t *testing.T, base, series string) string {
	t.Helper()
	_, body := httpGet(t, base+"/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return ""
	}
	return string(m[1])
}

// waitUntil polls cond for up to 30 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
