package projections

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/chio-ledger/chio/internal/leafset"
)

// storedFlags reads the flags of the receipt record at leaf index leaf.
func storedFlags(t *testing.T, r *running, leaf uint64, id string) byte {
	t.Helper()
	rec, err := r.store.get(receiptLeafKey(leaf, id))
	if err != nil || len(rec) == 0 {
		t.Fatalf("receipt %s at leaf %d: %v (record %q)", id, leaf, err, rec)
	}
	return rec[0]
}

// flipSignatureDigit changes one hex digit of a leaf's signature.
func flipSignatureDigit(leaf []byte) []byte {
	out := bytes.Clone(leaf)
	i := bytes.Index(out, []byte(`"signature":"`)) + len(`"signature":"`)
	if out[i] == '0' {
		out[i] = '1'
	} else {
		out[i] = '0'
	}
	return out
}

// With WithTrustedLeaves, a receipt whose exact bytes are in the set is
// not verified again; every other one is verified as before: bytes that
// differ from a leaf in the set, an outsider's receipt, a receipt signed
// by an untrusted kernel key even when its hash is in the set.
func TestTrustedLeavesSkipOnlyExactBytes(t *testing.T) {
	h := newHarness(t)
	set, err := leafset.New(64)
	if err != nil {
		t.Fatal(err)
	}
	add := func(leaf []byte) { set.Add([][32]byte{leafset.LeafHash(leaf)}) }

	genuine := receiptLeaf(t, kernelPriv, "rcpt-genuine", "cap-a", 1760000000, 1, true)
	add(genuine)
	// The ledger signed this one; what reaches the stream is it with the
	// tool name changed: its hash is not the one in the set.
	signed := receiptLeaf(t, kernelPriv, "rcpt-altered", "cap-a", 1760000001, 1, true)
	add(signed)
	altered := bytes.Replace(signed, []byte(`"tool_name":"buy"`), []byte(`"tool_name":"bux"`), 1)
	if bytes.Equal(altered, signed) {
		t.Fatal("the alteration changed nothing")
	}
	// An outsider's receipt, signed by a key the projection does not trust.
	outsider := receiptLeaf(t, otherPriv, "rcpt-outsider", "cap-a", 1760000002, 1, true)
	// In the set although signed by an untrusted kernel: the kernel key
	// check still applies (a set only this process's ledger fills never
	// holds one, but the fold does not rely on it).
	foreignInSet := receiptLeaf(t, otherPriv, "rcpt-foreign-in-set", "cap-a", 1760000003, 1, true)
	add(foreignInSet)
	// A broken signature whose bytes are in the set: marked verified,
	// which shows that a hit is not checked again, and why only the
	// process's own ledger may fill the set.
	planted := flipSignatureDigit(receiptLeaf(t, kernelPriv, "rcpt-planted", "cap-a", 1760000004, 1, true))
	add(planted)
	// A broken signature not in the set: checked, and refused.
	broken := flipSignatureDigit(receiptLeaf(t, kernelPriv, "rcpt-broken", "cap-a", 1760000005, 1, true))

	cases := []struct {
		id       string
		raw      []byte
		verified bool
	}{
		{"rcpt-genuine", genuine, true},
		{"rcpt-altered", altered, false},
		{"rcpt-outsider", outsider, false},
		{"rcpt-foreign-in-set", foreignInSet, false},
		{"rcpt-planted", planted, true},
		{"rcpt-broken", broken, false},
	}
	for i, c := range cases {
		h.receipt(c.id, uint64(i), c.raw)
	}
	reg := prometheus.NewRegistry()
	r := h.start("proj", WithTrustedLeaves(set.Contains), WithMetrics(reg))
	h.caughtUp(r)
	for i, c := range cases {
		if got := storedFlags(t, r, uint64(i), c.id)&receiptVerified != 0; got != c.verified {
			t.Errorf("%s: verified %v, want %v", c.id, got, c.verified)
		}
	}
	want := map[string]float64{"signed_here": 2, "unverified": 4}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		got := series(t, reg, "chio_projection_receipts_checked_total")
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("checked: %v, want %v", got, want)
		}
	}

	// Without the option (a standalone projections service) the same
	// stream is verified receipt by receipt: only the planted one differs.
	plain := h.start("plain", WithName("plain"))
	h.caughtUp(plain)
	for i, c := range cases {
		want := c.verified && c.id != "rcpt-planted"
		if got := storedFlags(t, plain, uint64(i), c.id)&receiptVerified != 0; got != want {
			t.Errorf("without the option, %s: verified %v, want %v", c.id, got, want)
		}
	}
}

// A verified receipt's record keeps its leaf hash, not its bytes (the log
// has them); one that did not verify keeps them, the only copy outside the
// stream.
func TestReceiptRecordKeepsUnverifiedBytesAndVerifiedLeafHash(t *testing.T) {
	h := newHarness(t)
	good := receiptLeaf(t, kernelPriv, "rcpt-good", "cap-a", 1760000000, 1, true)
	forged := receiptLeaf(t, otherPriv, "rcpt-forged", "cap-a", 1760000001, 1, true)
	goodHash := leafset.LeafHash(good) // what the log's leaf must hash to
	h.receipt("rcpt-good", 0, good)
	h.receipt("rcpt-forged", 1, forged)
	r := h.start("proj")
	h.caughtUp(r)
	for _, c := range []struct {
		id   string
		leaf uint64
		raw  []byte
	}{{"rcpt-good", 0, goodHash[:]}, {"rcpt-forged", 1, forged}} {
		rec, err := r.store.get(receiptLeafKey(c.leaf, c.id))
		if err != nil {
			t.Fatal(err)
		}
		n := 3 + int(binary.BigEndian.Uint16(rec[1:3])) // flags, u16 reason length, reason
		if got := rec[n:]; !bytes.Equal(got, c.raw) {
			t.Fatalf("%s: record holds %d bytes after its reason, want %d", c.id, len(got), len(c.raw))
		}
	}
}
