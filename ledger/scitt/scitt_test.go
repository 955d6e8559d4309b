package scitt_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"

	"github.com/fxamacker/cbor/v2"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"github.com/veraison/go-cose"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/scitt"
	"github.com/chio-ledger/chio/schemas"
)

// fixture is a log of seven receipt-like leaves and the keys of an export.
type fixture struct {
	signers   scitt.Signers
	kernelPub ed25519.PublicKey
	tree      *testonly.Tree
	leaves    [][]byte
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	kpub, kpriv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	skey, vkey, err := note.GenerateKey(rand.Reader, "example.com/chio-log")
	if err != nil {
		t.Fatal(err)
	}
	signer, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	logPub, err := scitt.VKeyPublicKey(vkey)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{signers: scitt.Signers{Kernel: kpriv, Log: signer, LogPublic: logPub, Origin: signer.Name()},
		kernelPub: kpub, tree: testonly.New(rfc6962.DefaultHasher)}
	for i := range 7 {
		leaf := fmt.Appendf(nil, `{"id":"r-%d","kernel_key":%q,"tool_name":"read_file"}`, i, schemas.EncodePublicKey(kpub))
		f.leaves = append(f.leaves, leaf)
		f.tree.AppendData(leaf)
	}
	return f
}

func (f *fixture) export(t *testing.T, i uint64) []byte {
	t.Helper()
	path, err := f.tree.InclusionProof(i, f.tree.Size())
	if err != nil {
		t.Fatal(err)
	}
	ts, err := scitt.Export(f.signers, f.leaves[i], fmt.Sprintf("r-%d", i),
		scitt.Inclusion{Index: i, Size: f.tree.Size(), Path: path, Root: f.tree.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

// An export, read by go-cose (an independent COSE implementation) with
// the inclusion proof checked by transparency-dev/merkle: the statement
// verifies under the kernel key with its CWT claims and content type;
// its one COSE Receipt has vds 1 and, with the root the proof gives as
// its detached payload, verifies under the log key. This package's own
// Verify agrees.
func TestExportReadByGoCOSE(t *testing.T) {
	f := newFixture(t)
	for _, i := range []uint64{0, 3, 6} {
		ts := f.export(t, i)

		var st cose.Sign1Message
		if err := st.UnmarshalCBOR(ts); err != nil {
			t.Fatalf("go-cose reads no COSE_Sign1: %v", err)
		}
		kv, err := cose.NewVerifier(cose.AlgorithmEdDSA, f.kernelPub)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Verify(nil, kv); err != nil {
			t.Fatalf("statement signature (go-cose): %v", err)
		}
		if !bytes.Equal(st.Payload, f.leaves[i]) {
			t.Fatal("the statement's payload is not the receipt")
		}
		if ct := st.Headers.Protected[cose.HeaderLabelContentType]; ct != scitt.PayloadContentType {
			t.Fatalf("content type %v", ct)
		}
		claims, ok := st.Headers.Protected[cose.HeaderLabelCWTClaims].(map[any]any)
		if !ok || claims[int64(1)] != schemas.EncodePublicKey(f.kernelPub) || claims[int64(2)] != fmt.Sprintf("%sr-%d", scitt.SubjectPrefix, i) {
			t.Fatalf("CWT claims %v", st.Headers.Protected[cose.HeaderLabelCWTClaims])
		}

		receipts, ok := st.Headers.Unprotected[int64(394)].([]any)
		if !ok || len(receipts) != 1 {
			t.Fatalf("receipts header %v", st.Headers.Unprotected)
		}
		var rc cose.Sign1Message
		if err := rc.UnmarshalCBOR(receipts[0].([]byte)); err != nil {
			t.Fatalf("go-cose reads no COSE receipt: %v", err)
		}
		if rc.Headers.Protected[int64(395)] != int64(1) {
			t.Fatalf("vds %v", rc.Headers.Protected[int64(395)])
		}
		if rc.Payload != nil {
			t.Fatal("the receipt's payload is not detached")
		}
		vdp := rc.Headers.Unprotected[int64(396)].(map[any]any)
		var p []any
		if err := cbor.Unmarshal(vdp[int64(-1)].([]any)[0].([]byte), &p); err != nil {
			t.Fatal(err)
		}
		size, idx := uint64(p[0].(uint64)), uint64(p[1].(uint64))
		var path [][]byte
		for _, h := range p[2].([]any) {
			path = append(path, h.([]byte))
		}
		root, err := proof.RootFromInclusionProof(rfc6962.DefaultHasher, idx, size, rfc6962.DefaultHasher.HashLeaf(st.Payload), path)
		if err != nil || idx != i || !bytes.Equal(root, f.tree.Hash()) {
			t.Fatalf("inclusion proof (merkle): %v, leaf %d of %d", err, idx, size)
		}
		lv, err := cose.NewVerifier(cose.AlgorithmEdDSA, f.signers.LogPublic)
		if err != nil {
			t.Fatal(err)
		}
		rc.Payload = root
		if err := rc.Verify(nil, lv); err != nil {
			t.Fatalf("COSE receipt signature (go-cose): %v", err)
		}

		v, err := scitt.Verify(ts, f.kernelPub, f.signers.LogPublic)
		if err != nil || v.Index != i || !bytes.Equal(v.Root, f.tree.Hash()) || !bytes.Equal(v.Receipt, f.leaves[i]) {
			t.Fatalf("Verify: %v %+v", err, v)
		}
	}
}

// Verify refuses what is not the log's: another kernel or log key, a
// payload changed after signing, a proof for another leaf, and bytes
// that are not a COSE_Sign1.
func TestVerifyRefuses(t *testing.T) {
	f := newFixture(t)
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	good := f.export(t, 2)

	// Re-sign a statement whose receipt proves another leaf's inclusion.
	path, _ := f.tree.InclusionProof(3, f.tree.Size())
	swapped, err := scitt.Export(f.signers, f.leaves[2], "r-2", scitt.Inclusion{Index: 3, Size: f.tree.Size(), Path: path, Root: f.tree.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	tampered := bytes.Replace(good, []byte(`"r-2"`), []byte(`"r-9"`), 1)
	for name, c := range map[string]struct {
		ts             []byte
		kernel, logKey ed25519.PublicKey
		says           string
	}{
		"another kernel key": {good, other, f.signers.LogPublic, "kid"},
		"another log key":    {good, f.kernelPub, other, "COSE receipt: kid"},
		"payload changed":    {tampered, f.kernelPub, f.signers.LogPublic, "signature does not verify"},
		"another leaf":       {swapped, f.kernelPub, f.signers.LogPublic, "does not verify under the log key"},
		"not COSE":           {[]byte(`{"receipt":1}`), f.kernelPub, f.signers.LogPublic, "not CBOR"},
	} {
		if _, err := scitt.Verify(c.ts, c.kernel, c.logKey); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.says)
		}
	}
	if bytes.Equal(tampered, good) {
		t.Fatal("the tampering changed nothing")
	}
	// A receipt another kernel signed is not exported under this one.
	foreign := []byte(fmt.Sprintf(`{"id":"r-x","kernel_key":%q}`, schemas.EncodePublicKey(other)))
	if _, err := scitt.Export(f.signers, foreign, "r-x", scitt.Inclusion{Index: 0, Size: 1, Root: make([]byte, 32)}); err == nil ||
		!strings.Contains(err.Error(), "not this ledger's kernel key") {
		t.Fatalf("export of another kernel's receipt: %v", err)
	}
}

// BenchmarkExport is one transparent statement: two Ed25519 signatures
// and the CBOR around them (the proof is given).
func BenchmarkExport(b *testing.B) {
	f := newFixture(b)
	path, _ := f.tree.InclusionProof(3, f.tree.Size())
	in := scitt.Inclusion{Index: 3, Size: f.tree.Size(), Path: path, Root: f.tree.Hash()}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := scitt.Export(f.signers, f.leaves[3], "r-3", in); err != nil {
			b.Fatal(err)
		}
	}
}
