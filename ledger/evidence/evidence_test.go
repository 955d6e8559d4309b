package evidence

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/hostilejson"
	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/schemas"
)

// testLog is a real log store with signed receipts served by the
// ledger's read API (no projections: lineage is not readable there).
// Receipt i is of tool server "srv2" when i%4 == 3, else "srv"; of tool
// "tool-a" when i is even, else "tool-b"; denied when i%3 == 2, else
// allowed; of time 100+i; under capability "cap-1" when i is even, else
// "cap-2". beforeProof, when set, runs before each inclusion proof is
// served.
type testLog struct {
	url, vkey, kernel string
	ids               []string

	store  *logstore.Store
	sign   func(_, to uint64, root []byte, _ uint64) ([]byte, []byte, error)
	key    ed25519.PrivateKey
	deep   []int
	server *httptest.Server

	mu          sync.Mutex
	beforeProof func()
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
	l := &testLog{vkey: vkey, kernel: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey)), store: store, key: kernel, deep: deep,
		sign: func(_, to uint64, root []byte, _ uint64) ([]byte, []byte, error) {
			signed, err := note.Sign(&note.Note{Text: string((&tlog.Checkpoint{Origin: origin, Size: to, Hash: root}).Marshal())}, signer)
			return signed, nil, err
		}}
	if err := l.grow(n); err != nil {
		tb.Fatal(err)
	}
	h := api.New(store, api.Keys{Origin: origin, CheckpointVKey: vkey, KernelKey: l.kernel}, slog.New(slog.DiscardHandler),
		api.WithAuthenticator(readauth.New(readauth.WithServiceToken("op"))))
	e := api.NewServer(h)
	l.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/inclusion-proof") {
			l.mu.Lock()
			f := l.beforeProof
			l.mu.Unlock()
			if f != nil {
				f()
			}
		}
		e.ServeHTTP(w, r)
	}))
	tb.Cleanup(l.server.Close)
	l.url = l.server.URL
	return l
}

// grow appends n receipts in one batch and signs the new checkpoint.
func (l *testLog) grow(n int) error {
	tx := l.store.Begin()
	for range n {
		i := len(l.ids)
		id := fmt.Sprintf("r-%06d", i)
		params := json.RawMessage(fmt.Sprintf(`{"q":%d,"s":"<&>"}`, i))
		if slices.Contains(l.deep, i) {
			params = json.RawMessage(`{"x":` + hostilejson.Nested(9998) + `}`)
		}
		server, tool, capID, decision := "srv", "tool-a", "cap-1", schemas.Decision{Verdict: schemas.VerdictAllow}
		if i%4 == 3 {
			server = "srv2"
		}
		if i%2 == 1 {
			tool, capID = "tool-b", "cap-2"
		}
		if i%3 == 2 {
			decision = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "no", Guard: "test"}
		}
		ts := uint64(100 + i)
		leaf, err := schemas.SignReceiptLeaf(l.key, schemas.ReceiptBody{ID: id, Timestamp: ts, CapabilityID: capID,
			ToolServer: server, ToolName: tool, Action: schemas.ToolCallAction{Parameters: params},
			Decision: decision, ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated})
		if err != nil {
			tx.Discard()
			return err
		}
		if _, err := tx.Append(leaf, logstore.Summary{ReceiptID: id, Timestamp: ts, CapabilityID: capID, ToolServer: server,
			ToolName: tool, Verdict: string(decision.Verdict)}); err != nil {
			tx.Discard()
			return err
		}
		l.ids = append(l.ids, id)
	}
	return tx.Commit(l.sign)
}

// inFilter reports whether receipt i of a testLog is inside f (principal
// aside: the test log has no lineage).
func inFilter(i int, f Filter) bool {
	server, tool, outcome, ts := "srv", "tool-a", "allow", uint64(100+i)
	if i%4 == 3 {
		server = "srv2"
	}
	if i%2 == 1 {
		tool = "tool-b"
	}
	if i%3 == 2 {
		outcome = "deny"
	}
	return (f.ToolServer == "" || f.ToolServer == server) && (f.ToolName == "" || f.ToolName == tool) &&
		(f.Outcome == "" || f.Outcome == outcome) && (f.Since == 0 || ts >= f.Since) && (f.Until == 0 || ts <= f.Until)
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
	if err != nil || rep.Receipts != 5 || rep.Unreadable != 1 || rep.Lineage != 0 || rep.Files != 7 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	// The unreadable receipt's raw bytes are what its signature covers.
	u.Raw[bytes.Index(u.Raw, []byte(`"tool_name":"tool-a"`))+len(`"tool_name":"t`)] = 'T'
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

// exportTo exports l's receipts under f into a new directory.
func exportTo(t *testing.T, l *testLog, f Filter) (string, *Query) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pkg")
	q, err := Export(context.Background(), &Client{Base: l.url, Token: "op"}, dir, Options{Filter: f, PageSize: 3, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return dir, q
}

// packageLines reads an .ndjson file of a package, each line with its
// newline.
func packageLines(t *testing.T, dir, name string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.SplitAfter(b, []byte("\n"))[:bytes.Count(b, []byte("\n"))]
}

func writeLines(t *testing.T, dir, name string, lines [][]byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), bytes.Join(lines, nil), 0o644); err != nil {
		t.Fatal(err)
	}
}

// editQuery rewrites query.json through edit, as a forger would.
func editQuery(t *testing.T, dir string, edit func(*Query)) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, QueryFile))
	if err != nil {
		t.Fatal(err)
	}
	var q Query
	if err := json.Unmarshal(raw, &q); err != nil {
		t.Fatal(err)
	}
	edit(&q)
	out, _ := json.MarshalIndent(q, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, QueryFile), append(out, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEvidenceFilter exports under each filter and checks the package
// holds exactly the receipts the filter selects and verifies; then that a
// package whose query.json claims a narrower filter than its receipts
// fit, with the manifest rewritten, fails at the first receipt outside it.
func TestEvidenceFilter(t *testing.T) {
	const n = 12
	l := newTestLog(t, n)
	all, _ := exportTo(t, l, Filter{})
	for _, c := range []struct {
		name   string
		filter Filter
	}{
		{"tool server", Filter{ToolServer: "srv2"}},
		{"tool name", Filter{ToolName: "tool-b"}},
		{"server and tool", Filter{ToolServer: "srv", ToolName: "tool-b"}},
		{"outcome", Filter{Outcome: "deny"}},
		{"since", Filter{Since: 105}},
		{"until", Filter{Until: 104}},
		{"since and until", Filter{Since: 103, Until: 108}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var want []string
			firstOutside := 0
			for i, id := range l.ids {
				if inFilter(i, c.filter) {
					want = append(want, id)
				} else if firstOutside == 0 {
					firstOutside = i + 1
				}
			}
			dir, q := exportTo(t, l, c.filter)
			rep, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel})
			if err != nil || q.Receipts != uint64(len(want)) || rep.Receipts != len(want) || rep.Filter != c.filter {
				t.Fatalf("export %+v, verify %+v %v; want %d receipts", q, rep, err, len(want))
			}
			for i, line := range packageLines(t, dir, ReceiptsFile) {
				if !bytes.Contains(line, []byte(`"id":"`+want[i]+`"`)) {
					t.Fatalf("line %d is not receipt %s", i+1, want[i])
				}
			}

			// Every receipt of the log, claimed to be this filter's.
			forged := filepath.Join(t.TempDir(), "pkg")
			if err := os.CopyFS(forged, os.DirFS(all)); err != nil {
				t.Fatal(err)
			}
			editQuery(t, forged, func(q *Query) { q.Filter = c.filter })
			remanifest(t, forged)
			_, err = Verify(forged, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel})
			if wantErr := fmt.Sprintf("%s:%d: filter:", ReceiptsFile, firstOutside); err == nil || !strings.HasPrefix(err.Error(), wantErr) {
				t.Fatalf("a filter its receipts do not fit: %v, want %q", err, wantErr)
			}
			t.Log(err)
		})
	}
}

// TestEvidenceTamperedSelection edits a filtered package as a forger who
// rewrites query.json and the manifest would: a receipt outside the filter
// swapped in fails; a receipt left out cannot be caught offline, and the
// package then verifies with one receipt fewer, as documented: only a
// second look at the log (here, a second export) shows it.
func TestEvidenceTamperedSelection(t *testing.T) {
	l := newTestLog(t, 9)
	opts := VerifyOptions{VKey: l.vkey, KernelKey: l.kernel}
	all, _ := exportTo(t, l, Filter{})
	filter := Filter{ToolName: "tool-a"} // receipts 0, 2, 4, 6, 8
	base, q := exportTo(t, l, filter)
	if q.Receipts != 5 {
		t.Fatalf("query %+v", q)
	}
	copyPkg := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "pkg")
		if err := os.CopyFS(dir, os.DirFS(base)); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	allReceipts, allProofs := packageLines(t, all, ReceiptsFile), packageLines(t, all, ProofsFile)

	t.Run("a receipt outside the filter swapped in, log order kept", func(t *testing.T) {
		dir := copyPkg(t)
		// Line 2 is receipt 2 (tool-a); receipt 3 (tool-b) is a valid
		// receipt of the same log between it and receipt 4.
		r, p := packageLines(t, dir, ReceiptsFile), packageLines(t, dir, ProofsFile)
		r[1], p[1] = allReceipts[3], allProofs[3]
		writeLines(t, dir, ReceiptsFile, r)
		writeLines(t, dir, ProofsFile, p)
		remanifest(t, dir)
		if _, err := Verify(dir, opts); err == nil || !strings.HasPrefix(err.Error(), ReceiptsFile+":2: filter:") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a receipt outside the filter added, counts rewritten", func(t *testing.T) {
		dir := copyPkg(t)
		r, p := packageLines(t, dir, ReceiptsFile), packageLines(t, dir, ProofsFile)
		r = slices.Insert(r, 2, allReceipts[3])
		p = slices.Insert(p, 2, allProofs[3])
		writeLines(t, dir, ReceiptsFile, r)
		writeLines(t, dir, ProofsFile, p)
		editQuery(t, dir, func(q *Query) { q.Receipts++ })
		remanifest(t, dir)
		if _, err := Verify(dir, opts); err == nil || !strings.HasPrefix(err.Error(), ReceiptsFile+":3: filter:") {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("a receipt dropped, counts rewritten: not detectable offline", func(t *testing.T) {
		dir := copyPkg(t)
		r, p := packageLines(t, dir, ReceiptsFile), packageLines(t, dir, ProofsFile)
		writeLines(t, dir, ReceiptsFile, slices.Delete(r, 1, 2))
		writeLines(t, dir, ProofsFile, slices.Delete(p, 1, 2))
		editQuery(t, dir, func(q *Query) { q.Receipts-- })
		remanifest(t, dir)
		rep, err := Verify(dir, opts)
		if err != nil {
			t.Fatalf("a package with a receipt left out and its counts and manifest rewritten: %v; the documentation says it verifies", err)
		}
		// Verify reports what it verified; completeness is the log's to
		// show: the same filter exported again at the same size holds
		// one receipt more.
		again, q2 := exportTo(t, l, filter)
		rep2, err := Verify(again, opts)
		if err != nil || rep.Receipts != 4 || rep2.Receipts != 5 || q2.TreeSize != rep.TreeSize {
			t.Fatalf("tampered %+v, exported again %+v %v", rep, rep2, err)
		}
	})
}

// TestEvidenceCheckpointMoves appends receipts while an export runs: every
// proof is still at the package's checkpoint, and the later receipts are
// left out.
func TestEvidenceCheckpointMoves(t *testing.T) {
	l := newTestLog(t, 6)
	var once sync.Once
	var growErr error
	l.mu.Lock()
	l.beforeProof = func() { once.Do(func() { growErr = l.grow(4) }) }
	l.mu.Unlock()
	dir, q := exportTo(t, l, Filter{})
	if growErr != nil {
		t.Fatal(growErr)
	}
	rep, err := Verify(dir, VerifyOptions{VKey: l.vkey, KernelKey: l.kernel})
	if err != nil || q.TreeSize != 6 || rep.TreeSize != 6 || rep.Receipts != 6 {
		t.Fatalf("export %+v, verify %+v %v", q, rep, err)
	}
	for i, line := range packageLines(t, dir, ProofsFile) {
		var p ProofLine
		if err := json.Unmarshal(line, &p); err != nil || p.TreeSize != 6 {
			t.Fatalf("proof %d: %v %s", i+1, err, line)
		}
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
