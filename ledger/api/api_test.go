package api

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/ledger/tlogproof"
	"github.com/chio-ledger/chio/schemas"
	"github.com/chio-ledger/chio/schemas/dpop"
)

const origin = "api.test/log"

type fixture struct {
	srv      *httptest.Server
	store    *logstore.Store
	verifier note.Verifier
	signer   note.Signer
	vkey     string
	kernel   ed25519.PrivateKey
	ids      []string
	tenants  *tenants
}

// leafFunc makes the leaf of receipt i from the body the fixture would
// sign; nil leaves it to the fixture.
type leafFunc func(i int, kernel ed25519.PrivateKey, body schemas.ReceiptBody) []byte

// operatorToken is the fixture's bootstrap service token.
const operatorToken = "operator-token"

// newFixture fills a real store with n signed receipts in batches of 7,
// checkpointing each batch as the ledger does. leafOf, if given, makes
// the leaves it returns a leaf for.
func newFixture(t *testing.T, n int, leafOf ...leafFunc) *fixture {
	t.Helper()
	skey, vkey, _ := note.GenerateKey(rand.Reader, origin)
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	_, kernel, _ := ed25519.GenerateKey(rand.Reader)
	store, err := logstore.Open(t.TempDir(), logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	sign := func(from, to uint64, root []byte, seq uint64) ([]byte, []byte, error) {
		cp := tlog.Checkpoint{Origin: origin, Size: to, Hash: root}
		signed, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, signer)
		if err != nil || to == 0 {
			return signed, nil, err
		}
		st, err := schemas.SignCheckpointStatement(kernel, schemas.CheckpointBody{CheckpointSeq: seq, BatchStartSeq: from + 1,
			BatchEndSeq: to, TreeSize: to, MerkleRoot: schemas.EncodeHash(root), IssuedAt: 1})
		if err != nil {
			return nil, nil, err
		}
		raw, err := json.Marshal(st)
		return signed, raw, err
	}
	f := &fixture{store: store, verifier: verifier, signer: signer, vkey: vkey, kernel: kernel, tenants: newTenants(t)}
	if err := store.Begin().Commit(sign); err != nil { // size-0 checkpoint
		t.Fatal(err)
	}
	for i := 0; i < n; {
		tx := store.Begin()
		for j := 0; j < 7 && i < n; j, i = j+1, i+1 {
			params := json.RawMessage(fmt.Sprintf(`{"i":%d,"text":"secret-%03d"}`, i, i))
			ph, _ := schemas.ParameterHash(params)
			verdict := schemas.Decision{Verdict: schemas.VerdictAllow}
			if i%2 == 1 {
				verdict = schemas.Decision{Verdict: schemas.VerdictDeny, Reason: "no", Guard: "g"}
			}
			id := fmt.Sprintf("r-%03d", i)
			body := schemas.ReceiptBody{ID: id, Timestamp: uint64(1000 + i),
				CapabilityID: fmt.Sprintf("cap-%d", i%3), ToolServer: "fs", ToolName: "read", Action: schemas.ToolCallAction{Parameters: params, ParameterHash: ph},
				Decision: verdict, ContentHash: schemas.EmptyContentHash, PolicyHash: "p", TrustLevel: schemas.TrustMediated}
			var leaf []byte
			if len(leafOf) > 0 {
				leaf = leafOf[0](i, kernel, body)
			}
			if leaf == nil {
				r, err := schemas.SignReceipt(kernel, body)
				if err != nil {
					t.Fatal(err)
				}
				leaf, _ = schemas.CanonicalReceipt(r)
			}
			r := &body
			if _, err := tx.Append(leaf, logstore.Summary{ReceiptID: id, Timestamp: r.Timestamp, CapabilityID: r.CapabilityID,
				ToolServer: r.ToolServer, ToolName: r.ToolName, Verdict: string(r.Decision.Verdict),
				Principals: f.tenants.paths[i%3]}); err != nil {
				t.Fatal(err)
			}
			f.ids = append(f.ids, id)
		}
		if err := tx.Commit(sign); err != nil {
			t.Fatal(err)
		}
	}
	h := New(store, Keys{Origin: origin, CheckpointVKey: vkey, KernelKey: schemas.EncodePublicKey(kernel.Public().(ed25519.PublicKey))},
		slog.New(slog.DiscardHandler), WithAuthenticator(f.tenants.auth))
	f.srv = httptest.NewServer(NewServer(h))
	t.Cleanup(f.srv.Close)
	return f
}

// get reads path as the operator.
func (f *fixture) get(t *testing.T, path string) (int, http.Header, []byte) {
	t.Helper()
	return f.getAs(t, operatorToken, path)
}

// getAs reads path with token ("" = anonymous): as Authorization: DPoP
// with a fresh proof when the fixture holds the token's key and the token
// can delegate, else as a bearer credential.
func (f *fixture) getAs(t *testing.T, token, path string) (int, http.Header, []byte) {
	t.Helper()
	return f.do(t, path, func(h http.Header, url string) {
		if s := f.tenants.signers[token]; s != nil {
			if err := s.Authorize(h, http.MethodGet, url); err != nil {
				t.Fatal(err)
			}
			return
		}
		if token != "" {
			h.Set("Authorization", "Bearer "+token)
		}
	})
}

// do GETs path with the headers auth sets for the request's URL (its htu:
// without the query).
func (f *fixture) do(t *testing.T, path string, auth func(h http.Header, url string)) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	auth(req.Header, dpop.RequestURLOf(req.URL.Scheme, req.URL.Host, req.URL.EscapedPath()))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, b
}

func TestProofsFromTheAPIVerify(t *testing.T) {
	f := newFixture(t, 600)
	status, hdr, cpRaw := f.get(t, "/log/checkpoint")
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("checkpoint: %d %s", status, hdr.Get("Content-Type"))
	}
	cp, _, _, err := tlog.ParseCheckpoint(cpRaw, origin, f.verifier)
	if err != nil || cp.Size != 600 {
		t.Fatalf("checkpoint %v %+v", err, cp)
	}
	for _, id := range []string{"r-000", "r-255", "r-256", "r-599"} {
		status, _, body := f.get(t, "/v1/receipts/"+id+"/inclusion-proof")
		if status != 200 {
			t.Fatalf("%s: %d %s", id, status, body)
		}
		var p InclusionProof
		if err := json.Unmarshal(body, &p); err != nil {
			t.Fatal(err)
		}
		_, _, rbody := f.get(t, "/v1/receipts/"+id)
		var got struct {
			Receipt   json.RawMessage `json:"receipt"`
			LeafIndex uint64          `json:"leaf_index"`
		}
		if err := json.Unmarshal(rbody, &got); err != nil {
			t.Fatal(err)
		}
		leafHash := rfc6962.DefaultHasher.HashLeaf(got.Receipt)
		if schemas.EncodeHash(leafHash) != p.LeafHash || got.LeafIndex != p.LeafIndex {
			t.Fatalf("%s: leaf hash or index disagree", id)
		}
		path := make([][]byte, len(p.AuditPath))
		for i, s := range p.AuditPath {
			path[i], _ = schemas.ParseHash(s)
		}
		if err := proof.VerifyInclusion(rfc6962.DefaultHasher, p.LeafIndex, cp.Size, leafHash, path, cp.Hash); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if p.Checkpoint != string(cpRaw) {
			t.Fatal("proof does not carry the latest checkpoint")
		}
	}
	// The same proof as a C2SP tlog-proof document.
	status, hdr, doc := f.get(t, "/v1/receipts/r-256/tlog-proof")
	if status != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("tlog-proof: %d %s", status, doc)
	}
	tp, err := tlogproof.Parse(doc)
	if err != nil || tp.Index != 256 || string(tp.Checkpoint) != string(cpRaw) {
		t.Fatalf("tlog-proof: %+v %v", tp, err)
	}
	_, _, rbody := f.get(t, "/v1/receipts/r-256")
	var served struct {
		Receipt json.RawMessage `json:"receipt"`
	}
	_ = json.Unmarshal(rbody, &served)
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, tp.Index, cp.Size, rfc6962.DefaultHasher.HashLeaf(served.Receipt), tp.Path, cp.Hash); err != nil {
		t.Fatalf("tlog-proof does not verify: %v", err)
	}
	// Against an older signed size: 7 is a batch boundary.
	status, _, body := f.get(t, "/v1/receipts/r-003/inclusion-proof?tree_size=7")
	if status != 200 {
		t.Fatalf("tree_size=7: %d %s", status, body)
	}
	var p InclusionProof
	_ = json.Unmarshal(body, &p)
	old, _, _, err := tlog.ParseCheckpoint([]byte(p.Checkpoint), origin, f.verifier)
	if err != nil || old.Size != 7 || p.TreeSize != 7 {
		t.Fatalf("old checkpoint: %v %+v", err, old)
	}
	// Consistency between two signed sizes.
	status, _, body = f.get(t, "/v1/log/consistency-proof?from=7&to=600")
	if status != 200 {
		t.Fatalf("consistency: %d %s", status, body)
	}
	var cproof ConsistencyProof
	_ = json.Unmarshal(body, &cproof)
	hashes := make([][]byte, len(cproof.Proof))
	for i, s := range cproof.Proof {
		hashes[i], _ = schemas.ParseHash(s)
	}
	if err := proof.VerifyConsistency(rfc6962.DefaultHasher, 7, 600, hashes, old.Hash, cp.Hash); err != nil {
		t.Fatal(err)
	}
	// From a size this instance never signed (another instance's batch
	// boundary): served, since the leaves and so the roots are the same.
	if status, _, body := f.get(t, "/v1/log/consistency-proof?from=5&to=600"); status != 200 || !strings.Contains(string(body), `"from":5`) {
		t.Fatalf("consistency from an unsigned size: %d %s", status, body)
	}
	// Statement.
	status, _, body = f.get(t, "/v1/checkpoints/latest")
	var st schemas.CheckpointStatement
	if err := json.Unmarshal(body, &st); status != 200 || err != nil {
		t.Fatalf("statement: %d %v", status, err)
	}
	if err := st.Verify(); err != nil || st.Body.TreeSize != 600 || st.Body.MerkleRoot != schemas.EncodeHash(cp.Hash) {
		t.Fatalf("statement %+v: %v", st.Body, err)
	}
}

func TestTilesFollowC2SP(t *testing.T) {
	f := newFixture(t, 600)
	cases := []struct {
		path   string
		status int
		size   int
	}{
		{"/log/tile/0/000", 200, 8192},
		{"/log/tile/0/001", 200, 8192},
		{"/log/tile/0/002", 404, 0}, // right edge is partial at 600
		{"/log/tile/0/002.p/88", 200, 88 * 32},
		{"/log/tile/0/002.p/89", 404, 0}, // wider than any checkpoint implies
		{"/log/tile/1/000.p/2", 200, 64},
		{"/log/tile/1/000", 404, 0},
		{"/log/tile/0/003.p/1", 404, 0},
		{"/log/tile/entries/000", 200, -1},
		{"/log/tile/entries/002.p/88", 200, -1},
		{"/log/tile/entries/002", 404, 0},
		{"/log/tile/64/000", 400, 0},
		{"/log/tile/00/000", 400, 0},
		{"/log/tile/-1/000", 400, 0},
		{"/log/tile/0/1", 400, 0},
		{"/log/tile/0/x000/001", 400, 0},
		{"/log/tile/0/000.p/0", 400, 0},
		{"/log/tile/0/000.p/256", 400, 0},
		{"/log/tile/0/x999/x999/x999/x999/x999/x999/999", 400, 0},
		{"/log/tile/entries/abc", 400, 0},
	}
	for _, c := range cases {
		status, hdr, body := f.get(t, c.path)
		if status != c.status {
			t.Errorf("%s: status %d, want %d (%s)", c.path, status, c.status, body)
			continue
		}
		if status != 200 {
			var e Error
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" || e.Code == "" {
				t.Errorf("%s: error body %q", c.path, body)
			}
			continue
		}
		if c.size >= 0 && len(body) != c.size {
			t.Errorf("%s: %d bytes, want %d", c.path, len(body), c.size)
		}
		if hdr.Get("Content-Type") != "application/octet-stream" || !strings.Contains(hdr.Get("Cache-Control"), "immutable") {
			t.Errorf("%s: headers %v", c.path, hdr)
		}
	}
}

func TestBadInputGetsJSONErrors(t *testing.T) {
	f := newFixture(t, 20)
	cases := []struct {
		path   string
		status int
		code   string
	}{
		{"/v1/receipts/nope", 404, "receipt_not_found"},
		{"/v1/receipts/..%2F..%2Fetc", 400, "bad_receipt_id"},
		{"/v1/receipts/" + strings.Repeat("a", 200), 400, "bad_receipt_id"},
		{"/v1/receipts/r-001/inclusion-proof?tree_size=-1", 400, "bad_parameter"},
		{"/v1/receipts/r-001/inclusion-proof?tree_size=99999999999999999999999", 400, "bad_parameter"},
		{"/v1/receipts/r-001/inclusion-proof?tree_size=18446744073709551615", 404, "no_checkpoint_at_size"},
		{"/v1/receipts/r-001/inclusion-proof?tree_size=5", 404, "no_checkpoint_at_size"},
		{"/v1/receipts/r-010/inclusion-proof?tree_size=7", 400, "leaf_not_in_tree"},
		{"/v1/receipts/r-001/inclusion-proof?tree_size=abc", 400, "bad_parameter"},
		{"/v1/log/consistency-proof?from=14&to=7", 400, "bad_range"},
		{"/v1/log/consistency-proof?from=7", 400, "bad_parameter"},
		{"/v1/log/consistency-proof?from=7&to=8", 404, "no_checkpoint_at_size"},
		{"/v1/log/consistency-proof?from=0&to=18446744073709551615", 404, "no_checkpoint_at_size"},
		{"/v1/receipts/query?limit=x", 400, "bad_parameter"},
		{"/v1/receipts/query?outcome=maybe", 400, "bad_parameter"},
		{"/v1/receipts/query?since=10&until=5", 400, "bad_range"},
		{"/v1/receipts/query?bogus=1", 400, "bad_parameter"},
		{"/v1/receipts/query?capabilityId=cap1%00", 400, "bad_parameter"},
		{"/v1/receipts/query?toolServer=fs%00&toolName=x", 400, "bad_parameter"},
		{"/v1/nothing", 404, "not_found"},
	}
	for _, c := range cases {
		status, hdr, body := f.get(t, c.path)
		var e Error
		if err := json.Unmarshal(body, &e); err != nil || status != c.status || e.Code != c.code || e.Error == "" ||
			!strings.HasPrefix(hdr.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s, want %d %s", c.path, status, body, c.status, c.code)
		}
	}
	// The empty-tree consistency proof is valid and empty.
	if status, _, body := f.get(t, "/v1/log/consistency-proof?from=0&to=7"); status != 200 || !strings.Contains(string(body), `"proof":[]`) {
		t.Errorf("consistency from 0: %d %s", status, body)
	}
}

func TestQueryPages(t *testing.T) {
	f := newFixture(t, 20)
	var all []string
	cursor := ""
	for pages := 0; ; pages++ {
		_, _, body := f.get(t, "/v1/receipts/query?limit=6"+cursor)
		var q struct {
			TotalCount uint64            `json:"totalCount"`
			NextCursor *uint64           `json:"nextCursor"`
			Receipts   []schemas.Receipt `json:"receipts"`
		}
		if err := json.Unmarshal(body, &q); err != nil {
			t.Fatal(err)
		}
		if q.TotalCount != 20 {
			t.Fatalf("totalCount %d", q.TotalCount)
		}
		for _, r := range q.Receipts {
			all = append(all, r.ID)
		}
		if q.NextCursor == nil {
			break
		}
		cursor = fmt.Sprintf("&cursor=%d", *q.NextCursor)
		if pages > 10 {
			t.Fatal("paging does not end")
		}
	}
	if len(all) != 20 || all[0] != "r-000" || all[19] != "r-019" {
		t.Fatalf("paged %v", all)
	}
	_, _, body := f.get(t, "/v1/receipts/query?capabilityId=cap-1&outcome=deny&since=1005")
	var q struct {
		TotalCount uint64            `json:"totalCount"`
		Receipts   []schemas.Receipt `json:"receipts"`
	}
	_ = json.Unmarshal(body, &q)
	var ids []string
	for _, r := range q.Receipts {
		ids = append(ids, r.ID)
	}
	if q.TotalCount != 3 || fmt.Sprint(ids) != "[r-007 r-013 r-019]" {
		t.Fatalf("filtered: %d %v", q.TotalCount, ids)
	}
}
