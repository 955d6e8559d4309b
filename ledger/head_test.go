package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/schemas"
)

// An older copy of the store restored under a ledger that published more:
// it serves no checkpoint or proof, and is not ready, until it has caught
// up from the stream to the head it published and its tree extends it;
// then it serves the larger checkpoint, never the smaller.
func TestPublishedHeadIsNeverRolledBack(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	headFile := filepath.Join(h.dir, "published-head.json")
	logDir := filepath.Join(h.dir, "log")
	store := h.openStore("log")
	run := h.start(store, WithHeadFile(headFile))
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 2)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	store.Close()
	older := filepath.Join(h.dir, "log-at-2")
	if err := os.CopyFS(older, os.DirFS(logDir)); err != nil {
		t.Fatal(err)
	}

	store = h.openStore("log")
	run = h.start(store, WithHeadFile(headFile))
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000100)
	waitSize(t, store, 5)
	waitFor(t, "the head of size 5 recorded in the file and the bucket", func() bool {
		raw, err := os.ReadFile(headFile)
		var f PublishedHead
		if err != nil || json.Unmarshal(raw, &f) != nil || f.Size != 5 {
			return false
		}
		kv, err := h.js.KeyValue(ctx, schemas.LogBucket)
		if err != nil {
			return false
		}
		e, err := kv.Get(ctx, logKeyHead)
		return err == nil && json.Unmarshal(e.Value(), &f) == nil && f.Size == 5
	})
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	store.Close()

	// The older copy goes back in place, and the ledger's first batch
	// fails: it stays behind.
	if err := os.RemoveAll(logDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(older, logDir); err != nil {
		t.Fatal(err)
	}
	store = h.openStore("log")
	defer store.Close()
	stuck := errors.New("stop before the first commit")
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithHeadFile(headFile), func(c *config) {
		c.fault = func(stage string, _ int) error {
			if stage == "before-commit" {
				return stuck
			}
			return nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Run(ctx); !errors.Is(err, stuck) {
		t.Fatalf("Run = %v", err)
	}
	var behind *BehindError
	if err := l.HeadErr(); !errors.As(err, &behind) || behind.Size != 2 || behind.Published != 5 {
		t.Fatalf("HeadErr of the older copy = %v", err)
	}
	srv := httptest.NewServer(api.NewServer(api.New(store, api.Keys{Origin: testOrigin}, quiet(), api.WithServing(l.HeadErr))))
	defer srv.Close()
	for _, path := range []string{"/log/checkpoint", "/v1/checkpoints/latest", "/log/tile/0/000", "/v1/log/consistency-proof?old=1&new=2"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("GET %s while behind: %d, want 503", path, resp.StatusCode)
		}
	}

	// A ledger that catches up serves the head it published, or larger.
	l2, err := New(h.js, store, h.keys, WithLogger(quiet()), WithHeadFile(headFile))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- l2.Run(cctx) }()
	waitSize(t, store, 5)
	waitFor(t, "the log to serve again", func() bool { return l2.HeadErr() == nil })
	cancel()
	<-done
	srv2 := httptest.NewServer(api.NewServer(api.New(store, api.Keys{Origin: testOrigin}, quiet(), api.WithServing(l2.HeadErr))))
	defer srv2.Close()
	resp, err := http.Get(srv2.URL + "/log/checkpoint")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "\n5\n") {
		t.Fatalf("checkpoint after catching up: %d %q", resp.StatusCode, body)
	}
}

// A tree that does not extend the published head is a fork: nothing is
// served, for good.
func TestPublishedHeadForkIsRefused(t *testing.T) {
	h := newHarness(t)
	headFile := filepath.Join(h.dir, "published-head.json")
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store)
	h.publishCalls([]call{newCall(schemas.VerdictDeny, ""), newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 2)
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	// Only the file names a head now.
	kv, err := h.js.KeyValue(context.Background(), schemas.LogBucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(context.Background(), logKeyHead); err != nil {
		t.Fatal(err)
	}
	for _, size := range []uint64{2, 1} { // at the store's size, and below it
		forged, _ := json.Marshal(PublishedHead{Origin: testOrigin, KeyHash: h.keys.CheckpointVerifier.KeyHash(), Size: size, Root: make([]byte, 32)})
		if err := os.WriteFile(headFile, forged, 0o600); err != nil {
			t.Fatal(err)
		}
		l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithHeadFile(headFile))
		if err != nil {
			t.Fatal(err)
		}
		l.loadHead(context.Background())
		if err := l.HeadErr(); !errors.Is(err, ErrForked) {
			t.Fatalf("HeadErr against a head of size %d the tree does not extend: %v", size, err)
		}
	}
	// Another log's head (other keys, same origin) is not this log's.
	other, _ := json.Marshal(PublishedHead{Origin: testOrigin, KeyHash: h.keys.CheckpointVerifier.KeyHash() + 1, Size: 9})
	if err := os.WriteFile(headFile, other, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithHeadFile(headFile))
	if err != nil {
		t.Fatal(err)
	}
	l.loadHead(context.Background())
	if err := l.HeadErr(); err != nil || l.head.want != nil {
		t.Fatalf("HeadErr with another log's head: %v (want %+v)", err, l.head.want)
	}
}

// An idle log signs a new checkpoint statement once its latest is older
// than the interval: same tree head, the next number, a later time.
func TestIdleLogSignsItsHeadAgain(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	run := h.start(store, WithCheckpointInterval(time.Second))
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, 1760000000)
	waitSize(t, store, 1)
	first := store.State()
	note := store.LatestCheckpoint()
	waitFor(t, "a statement signed while idle", func() bool { return store.State().CheckpointSeq > first.CheckpointSeq })
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	var a, b schemas.CheckpointStatement
	for seq, st := range map[uint64]*schemas.CheckpointStatement{first.CheckpointSeq: &a, first.CheckpointSeq + 1: &b} {
		raw, err := store.Statement(seq)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, st); err != nil {
			t.Fatal(err)
		}
	}
	if b.Body.TreeSize != 1 || b.Body.MerkleRoot != a.Body.MerkleRoot || b.Body.IssuedAt < a.Body.IssuedAt+1 || b.Body.BatchStartSeq != 1 || b.Body.BatchEndSeq != 1 {
		t.Fatalf("statement signed while idle %+v, after %+v", b.Body, a.Body)
	}
	if st := store.State(); st.Size != 1 || string(store.LatestCheckpoint()) != string(note) {
		t.Fatalf("the idle statement changed the tree or its note: size %d", st.Size)
	}
}

// A ledger that stops folding while events wait says its receipts are
// late once the oldest waiting event is older than the bound, and stops
// saying so once it has caught up.
func TestLateReceiptsAreReported(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	release := make(chan struct{})
	l, err := New(h.js, store, h.keys, WithLogger(quiet()), WithBatch(64, time.Millisecond), WithLagBound(100*time.Millisecond),
		func(c *config) {
			c.streamEvery = 20 * time.Millisecond
			c.fault = func(stage string, _ int) error {
				if stage == "before-commit" {
					<-release
				}
				return nil
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Run(ctx) }()
	defer func() { cancel(); <-done }()
	h.publishCalls([]call{newCall(schemas.VerdictDeny, "")}, 1760000000)
	var late *LagError
	waitFor(t, "receipts reported late", func() bool { return errors.As(l.LagErr(), &late) })
	if late.Lag <= 100*time.Millisecond || late.StreamSeq != 1 {
		t.Fatalf("LagErr = %+v", late)
	}
	close(release)
	waitSize(t, store, 1)
	waitFor(t, "the report cleared", func() bool { return l.LagErr() == nil })
}

// A look at the bucket that fails keeps the ledger from serving only
// until some look has read it: a later failure (NATS broken for a while)
// keeps the head already read and checked.
func TestPublishedHeadUnreadableBucket(t *testing.T) {
	h := newHarness(t)
	store := h.openStore("log")
	defer store.Close()
	failing, cancel := context.WithCancel(context.Background())
	cancel() // every JetStream request on it fails
	tests := []struct {
		name   string
		looks  []context.Context
		unread bool
	}{
		{"no look answered", []context.Context{failing}, true},
		{"read, then a look fails", []context.Context{context.Background(), failing}, false},
		{"failed, then read", []context.Context{failing, context.Background()}, false},
		// nil: Run starts a writer's tenure (a standby took the lease),
		// which must read the head again.
		{"read as a standby, then the writer's look fails", []context.Context{context.Background(), nil, failing}, true},
		{"read as a standby, then the writer's look answers", []context.Context{context.Background(), nil, context.Background()}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := New(h.js, store, h.keys, WithLogger(quiet()))
			if err != nil {
				t.Fatal(err)
			}
			for _, ctx := range tc.looks {
				if ctx == nil {
					l.head.forgetRead()
					continue
				}
				l.LoadPublishedHead(ctx)
			}
			if err := l.HeadErr(); errors.Is(err, errHeadUnread) != tc.unread {
				t.Fatalf("HeadErr = %v, want unread %v", err, tc.unread)
			}
			if !l.headUnread() && tc.looks[len(tc.looks)-1] == failing {
				t.Fatal("a failed last look must be looked at again")
			}
		})
	}
}
