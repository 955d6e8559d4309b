package witness

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/transparency-dev/formats/log"
	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"

	"github.com/chio-ledger/chio/internal/natstest"
)

// treeLog is a log of the cosigner: an RFC 6962 tree and its checkpoint
// signed by signer.
type treeLog struct {
	tree   *testonly.Tree
	signer note.Signer
	origin string
}

func (l treeLog) Head() (uint64, []byte) {
	cp := log.Checkpoint{Origin: l.origin, Size: l.tree.Size(), Hash: l.tree.Hash()}
	n, err := note.Sign(&note.Note{Text: string(cp.Marshal())}, l.signer)
	if err != nil {
		panic(err)
	}
	return l.tree.Size(), n
}

func (l treeLog) ConsistencyProof(from, to uint64) ([][]byte, error) {
	return l.tree.ConsistencyProof(from, to)
}

// A witness that answers 409 naming the same small size however the
// checkpoint is resent is counted for what it is, a repeated conflict,
// not as a witness ahead of the log (which would read as a fork).
func TestCosignerNamesARepeatedConflict(t *testing.T) {
	f := newClientFixture(t)
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.Header().Set("Content-Type", sizeContentType)
		w.WriteHeader(http.StatusConflict)
		fmt.Fprintln(w, 1)
	}))
	defer srv.Close()
	skey, vkey, err := note.GenerateKey(nil, "example.com/log")
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := note.NewSigner(skey)
	verifier, _ := note.NewVerifier(vkey)
	tree := testonly.New(rfc6962.DefaultHasher)
	for i := range 15 {
		tree.AppendData(fmt.Appendf(nil, "leaf %d", i))
	}
	p, err := ParsePolicy(strings.NewReader(fmt.Sprintf("witness w1 %s %s\nquorum w1\n", f.vkey, srv.URL)))
	if err != nil {
		t.Fatal(err)
	}
	_, _, js := natstest.Start(t)
	kv, err := OpenKV(t.Context(), js, 1)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	c, err := NewCosigner(treeLog{tree: tree, signer: signer, origin: "example.com/log"}, kv, p, verifier, WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Round(t.Context()); err == nil {
		t.Fatal("a round no witness cosigned met the quorum")
	}
	if n := posts.Load(); n != 2 {
		t.Fatalf("%d submissions, want 2 (the first and one resend)", n)
	}
	for result, want := range map[string]float64{"conflict": 1, "repeated_conflict": 1, "ahead": 0} {
		if got := testutil.ToFloat64(c.metrics.submissions.WithLabelValues("w1", result)); got != want {
			t.Errorf("submissions{result=%q} = %v, want %v", result, got, want)
		}
	}
}
