package api

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	tlog "github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/schemas"
)

// A cosigned checkpoint is served only once checked: signed by the log's
// key and consistent with this instance's own tree; proofs are then made
// at its size, even one this instance did not sign itself. A replica whose
// tree is smaller answers 503 rather than an older checkpoint.
func TestWitnessedCheckpointServed(t *testing.T) {
	f := newFixture(t, 20) // the fixture signs sizes 7, 14 and 20
	tree := testonly.New(rfc6962.DefaultHasher)
	if err := f.store.Entries(0, 20, func(_ uint64, leaf []byte) error { tree.AppendData(leaf); return nil }); err != nil {
		t.Fatal(err)
	}
	cosig := "— witness.example/w " + strings.Repeat("A", 96) + "\n" // a key the log does not know: ignored
	signed := func(s note.Signer, size uint64, root []byte) string {
		n, err := note.Sign(&note.Note{Text: string(tlog.Checkpoint{Origin: origin, Size: size, Hash: root}.Marshal())}, s)
		if err != nil {
			t.Fatal(err)
		}
		return string(n) + cosig
	}
	root := func(size uint64) []byte {
		cut := testonly.New(rfc6962.DefaultHasher)
		for i := range size {
			cut.Append(tree.LeafHash(i))
		}
		return cut.Hash()
	}
	otherKey, _, _ := note.GenerateKey(rand.Reader, origin)
	other, _ := note.NewSigner(otherKey)
	at10 := signed(f.signer, 10, root(10))
	serve := func(held string) *httptest.Server {
		h := New(f.store, Keys{Origin: origin, CheckpointVKey: f.vkey, KernelKey: schemas.EncodePublicKey(f.kernel.Public().(ed25519.PublicKey))},
			slog.New(slog.DiscardHandler), WithAuthenticator(f.tenants.auth), WithCosigned(func(context.Context) ([]byte, error) {
				switch held {
				case "":
					return nil, nil
				case "unreadable":
					return nil, errors.New("bucket unreachable")
				}
				return []byte(held), nil
			}))
		srv := httptest.NewServer(NewServer(h))
		t.Cleanup(srv.Close)
		return srv
	}
	get := func(srv *httptest.Server, path string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	head, _ := f.store.Checkpoint(20)
	for _, tc := range []struct {
		name, held string
		status     int
		want       string // the checkpoint served
	}{
		{"none held yet", "", 200, string(head)},
		{"cosigned at a size this instance did not sign", at10, 200, at10},
		// Never the uncosigned head instead of one that does not check.
		{"signed by another key", signed(other, 10, root(10)), 503, ""},
		{"a fork: another root at that size", signed(f.signer, 10, root(9)), 503, ""},
		{"past this instance's tree", signed(f.signer, 25, root(20)), 503, ""},
		{"unreadable", "unreadable", 503, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := serve(tc.held)
			status, body := get(srv, "/log/checkpoint")
			if status != tc.status || tc.want != "" && body != tc.want {
				t.Fatalf("/log/checkpoint: %d\n%s\nwant %d\n%s", status, body, tc.status, tc.want)
			}
		})
	}

	// Proofs against the witnessed checkpoint verify, at its size.
	srv := serve(at10)
	status, body := get(srv, "/v1/receipts/"+f.ids[2]+"/inclusion-proof")
	var ip InclusionProof
	if err := json.Unmarshal([]byte(body), &ip); status != 200 || err != nil || ip.TreeSize != 10 || ip.Checkpoint != at10 {
		t.Fatalf("inclusion proof: %d %v %s", status, err, body)
	}
	path := make([][]byte, len(ip.AuditPath))
	for i, s := range ip.AuditPath {
		path[i], _ = schemas.ParseHash(s)
	}
	if err := proof.VerifyInclusion(rfc6962.DefaultHasher, 2, 10, tree.LeafHash(2), path, root(10)); err != nil {
		t.Fatalf("inclusion at the witnessed size: %v", err)
	}
	if status, body := get(srv, "/v1/log/consistency-proof?from=7&to=10"); status != 200 {
		t.Fatalf("consistency to the witnessed size: %d %s", status, body)
	}
	if _, body := get(srv, "/v1/receipts/"+f.ids[15]+"/inclusion-proof"); !strings.Contains(body, `"tree_size":20`) {
		t.Fatalf("a leaf past the witnessed size is proved at the tree's own size: %s", body)
	}
	_, body = get(srv, "/v1/checkpoints/latest")
	var latest map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &latest); err != nil || !strings.Contains(string(latest["witnessed_checkpoint"]), "witness.example/w") {
		t.Fatalf("statement: %v %s", err, body)
	}
}
