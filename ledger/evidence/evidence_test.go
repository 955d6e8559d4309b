package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// testLog is a real log store with n signed receipts served by the
// ledger's read API (no projections: lineage is not readable there).
type testLog struct {
	url, vkey, kernel string
	ids               []string
}

// newTestLog appends n receipts; those at the indexes in deep carry
// arguments nested too deep for any reader, so the log marks them
// unreadable.
func newTestLog(tb testing.TB, n int, deep ...int) *testLog {
	tb.Helper()
	const origin = "evidence.test/log"
	skey, vkey, _ := note.GenerateKey(rand.Reader, origin)
	signer, _ := note.NewSigner(skey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	store, err := logstore.Open(tb.TempDir(), logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { store.Close() })
	sign := func(_, to uint64, root []byte, _ uint64) ([]byte, []byte, error) {
		signed, err := note.Sign(&note.Note{Text: string((&tlog.Checkpoint{Origin: origin, Size: to, Hash: root}).Marshal())}, signer)
		return signed, nil, err
	}
	l := &testLog{vkey: vkey, kernel: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))}
	tx := store.Begin()
	for i := range n {
		id := fmt.Sprintf("r-%06d", i)
		params := json.RawMessage(fmt.Sprintf(`{"q":%d,"s":"<&>"}`, i))
		for _, d := range deep {
			if d == i {
				params = json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`)
			}
		}
		leaf, err := schemas.SignReceiptLeaf(kernel, schemas.ReceiptBody{ID: id, Timestamp: 1, CapabilityID: "cap-1",
			ToolServer: "srv", ToolName: "tool", Action: schemas.ToolCallAction{Parameters: params},
			Decision:    schemas.Decision{Verdict: schemas.VerdictAllow},
			ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := tx.Append(leaf, logstore.Summary{ReceiptID: id, Timestamp: 1, CapabilityID: "cap-1", ToolServer: "srv",
			ToolName: "tool", Verdict: "allow"}); err != nil {
			tb.Fatal(err)
		}
		l.ids = append(l.ids, id)
	}
	if err := tx.Commit(sign); err != nil {
		tb.Fatal(err)
	}
	h := api.New(store, api.Keys{Origin: origin, CheckpointVKey: vkey, KernelKey: l.kernel}, slog.New(slog.DiscardHandler),
		api.WithAuthenticator(readauth.New(readauth.WithServiceToken("op"))))
	srv := httptest.NewServer(api.NewServer(h))
	tb.Cleanup(srv.Close)
	l.url = srv.URL
	return l
}

func TestEvidenceUnreadableReceipt(t *testing.T) {
	l := newTestLog(t, 5, 2)
	dir := filepath.Join(t.TempDir(), "pkg")
	q, err := Export(context.Background(), &Client{Base: l.url, Token: "op"}, dir, Options{PageSize: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if q.Receipts != 5 || q.Unreadable != 1 || q.Lineage.Readable || q.Lineage.Note == "" {
		t.Fatalf("query %+v", q)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, ReceiptsFile))
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	var u UnreadableLine
	if err := json.Unmarshal(lines[2], &u); err != nil || u.ReceiptID != l.ids[2] || u.LeafIndex != 2 || len(u.Raw) == 0 {
		t.Fatalf("line 3: %v %s", err, lines[2][:min(200, len(lines[2]))])
	}
	// Readable leaves are written as the log holds them, unescaped.
	if !bytes.Contains(lines[0], []byte(`"s":"<&>"`)) {
		t.Fatalf("line 1: %s", lines[0])
	}
	rep, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel})
	if err != nil || rep.Receipts != 5 || rep.Unreadable != 1 || rep.Lineage != 0 || rep.Files != 6 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// The unreadable receipt's raw bytes are what its signature covers.
	u.Raw[bytes.Index(u.Raw, []byte(`"tool_name":"tool"`))+len(`"tool_name":"t`)] = 'T'
	edited, _ := encodeLine(u)
	lines[2] = edited
	if err := os.WriteFile(filepath.Join(dir, ReceiptsFile), append(bytes.Join(lines, []byte("\n")), '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	remanifest(t, dir)
	if _, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel}); err == nil || err.Error()[:len("receipts.ndjson:3: receipt-signature")] != "receipts.ndjson:3: receipt-signature" {
		t.Fatalf("edited unreadable receipt: %v", err)
	}
}

// remanifest rewrites the manifest for the files present, as a forger would.
func remanifest(t *testing.T, dir string) {
	t.Helper()
	var entries []FileEntry
	des, _ := os.ReadDir(dir)
	for _, de := range des {
		if de.Name() == ManifestFile {
			continue
		}
		size, sum, err := hashFile(filepath.Join(dir, de.Name()))
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, FileEntry{Name: de.Name(), Size: size, SHA256: sum})
	}
	_ = os.Remove(filepath.Join(dir, ManifestFile))
	if err := writeManifest(dir, entries); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkEvidence exports and verifies a package of every receipt of a
// real log store served over HTTP on loopback.
func BenchmarkEvidence(b *testing.B) {
	const n = 2000
	l := newTestLog(b, n)
	opts := Options{Logger: slog.New(slog.DiscardHandler)}
	b.Run(fmt.Sprintf("export-%d", n), func(b *testing.B) {
		for b.Loop() {
			if _, err := Export(context.Background(), &Client{Base: l.url, Token: "op"}, filepath.Join(b.TempDir(), "pkg"), opts); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "receipts/s")
	})
	dir := filepath.Join(b.TempDir(), "pkg")
	if _, err := Export(context.Background(), &Client{Base: l.url, Token: "op"}, dir, opts); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("verify-%d", n), func(b *testing.B) {
		for b.Loop() {
			if _, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "receipts/s")
	})
}
