package monitor

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tlogfmt "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/logstore"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
)

const origin = "monitor.test/log"

// testLog is a real log store behind the ledger's real read API. tamper,
// when set, rewrites an answer on its way out: a log that lies.
type testLog struct {
	t       *testing.T
	store   *logstore.Store
	signers []note.Signer
	name    string // makes this log's leaves differ from another's
	next    int
	srv     *httptest.Server

	mu     sync.Mutex
	tamper func(path string, body []byte) []byte
}

func newTestLog(t *testing.T, name string, signers ...note.Signer) *testLog {
	t.Helper()
	s, err := logstore.Open(t.TempDir(), logstore.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	l := &testLog{t: t, store: s, signers: signers, name: name}
	l.grow(0) // the size-0 checkpoint, as a new ledger signs
	e := api.NewServer(api.New(s, api.Keys{Origin: origin}, slog.New(slog.DiscardHandler)))
	l.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		tamper := l.tamper
		l.mu.Unlock()
		if tamper == nil {
			e.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, r)
		body := tamper(r.URL.Path, rec.Body.Bytes())
		w.WriteHeader(rec.Code)
		_, _ = w.Write(body)
	}))
	t.Cleanup(l.srv.Close)
	return l
}

func (l *testLog) setTamper(f func(path string, body []byte) []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tamper = f
}

// grow appends n leaves in one batch and signs the new checkpoint.
func (l *testLog) grow(n int) {
	l.t.Helper()
	tx := l.store.Begin()
	for range n {
		id := fmt.Sprintf("%s-%d", l.name, l.next)
		l.next++
		if _, err := tx.Append([]byte(`{"id":"`+id+`"}`), logstore.Summary{ReceiptID: id}); err != nil {
			l.t.Fatal(err)
		}
	}
	err := tx.Commit(func(_, to uint64, root []byte, _ uint64) ([]byte, []byte, error) {
		text := tlogfmt.Checkpoint{Origin: origin, Size: to, Hash: root}.Marshal()
		n, err := note.Sign(&note.Note{Text: string(text)}, l.signers...)
		return n, nil, err
	})
	if err != nil {
		l.t.Fatal(err)
	}
}

func logKey(t *testing.T) (note.Signer, note.Verifier) {
	t.Helper()
	skey, vkey, err := note.GenerateKey(rand.Reader, origin)
	if err != nil {
		t.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	v, err := note.NewVerifier(vkey)
	if err != nil {
		t.Fatal(err)
	}
	return s, v
}

func newMonitor(t *testing.T, url string, v note.Verifier, statePath string, p *witness.Policy, reg prometheus.Registerer) *Monitor {
	t.Helper()
	m, err := New(Config{URL: url, Verifier: v, Policy: p, StatePath: statePath, Registerer: reg, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A growing log verifies at every size, across tile and tile-level
// boundaries; the state follows it, and a restarted monitor continues
// from its state file.
func TestFollowsAGrowingLog(t *testing.T) {
	signer, verifier := logKey(t)
	l := newTestLog(t, "a", signer)
	statePath := filepath.Join(t.TempDir(), "state.json")
	reg := prometheus.NewRegistry()
	m := newMonitor(t, l.srv.URL, verifier, statePath, nil, reg)
	ctx := context.Background()
	// 65536 leaves make the first level-2 tile.
	for _, add := range []int{0, 1, 4, 251, 1, 300, 255, 1, 64724, 3} {
		l.grow(add)
		want, _ := l.store.Head()
		res, err := m.Check(ctx)
		if err != nil {
			t.Fatalf("check at size %d: %v", want, err)
		}
		st, err := LoadState(statePath)
		if err != nil {
			t.Fatal(err)
		}
		if res.Size != want || st.Size != want || st.Root != schemas.EncodeHash(l.store.State().Root) {
			t.Fatalf("size %d: result %d, state %+v", want, res.Size, st)
		}
	}
	if got := gauge(t, reg, "chio_monitor_verified_tree_size", ""); got != float64(l.store.State().Size) {
		t.Fatalf("verified size metric %v", got)
	}
	if got := gauge(t, reg, "chio_monitor_checks_total", "ok"); got != 10 {
		t.Fatalf("%v ok checks counted", got)
	}

	// A restart reads the state and proves the next checkpoint from it.
	first := m.State().FirstSeen
	m2 := newMonitor(t, l.srv.URL, verifier, statePath, nil, nil)
	if _, err := m2.Check(ctx); err != nil {
		t.Fatal(err)
	}
	if !m2.State().FirstSeen.Equal(first) {
		t.Fatal("an unchanged checkpoint was given a new first-seen time")
	}
	l.grow(7)
	res, err := m2.Check(ctx)
	if err != nil || res.Previous == nil || res.Previous.Size != l.store.State().Size-7 {
		t.Fatalf("after a restart: %+v %v", res, err)
	}
}

// Each way a log can misbehave is a finding of its kind, and the state
// stays at the last good checkpoint.
func TestFindings(t *testing.T) {
	signer, verifier := logKey(t)
	_, otherVerifier := logKey(t) // same origin, another key
	ctx := context.Background()
	cases := []struct {
		name string
		// setup returns the log the monitor checks, after it verified a
		// first checkpoint on good (grown to 10 leaves)
		setup    func(good *testLog) *testLog
		verifier note.Verifier
		want     Kind
	}{
		{"rollback", func(*testLog) *testLog {
			l := newTestLog(t, "other", signer)
			l.grow(6)
			return l
		}, verifier, Rollback},
		{"fork of the same size", func(*testLog) *testLog {
			l := newTestLog(t, "other", signer)
			l.grow(10)
			return l
		}, verifier, Fork},
		{"fork that grew", func(*testLog) *testLog {
			l := newTestLog(t, "other", signer)
			l.grow(300)
			return l
		}, verifier, Fork},
		{"fork sharing a prefix", func(good *testLog) *testLog {
			l := newTestLog(t, "a", signer) // leaves 0–8 as the good log's
			l.grow(9)
			l.name = "b"
			l.grow(5)
			return l
		}, verifier, Fork},
		{"another key", func(good *testLog) *testLog { return good }, otherVerifier, BadSignature},
		{"forged checkpoint", func(good *testLog) *testLog {
			other, _ := logKey(t)
			l := newTestLog(t, "a", other)
			l.grow(12)
			return l
		}, verifier, BadSignature},
		{"a leaf tile that is not the root's", func(good *testLog) *testLog {
			good.grow(2)
			good.setTamper(func(path string, body []byte) []byte {
				if strings.HasPrefix(path, "/log/tile/0/") {
					body = bytes.Clone(body)
					body[0] ^= 1
				}
				return body
			})
			return good
		}, verifier, TileMismatch},
		{"a short tile", func(good *testLog) *testLog {
			good.grow(2)
			good.setTamper(func(path string, body []byte) []byte {
				if strings.HasPrefix(path, "/log/tile/") {
					return body[:len(body)-1]
				}
				return body
			})
			return good
		}, verifier, TileMismatch},
		{"a tile under a good parent that is not the root's", func(good *testLog) *testLog {
			// At 300 leaves the root comes from tiles 1/000.p/1 and
			// 0/001.p/44; a proof from 10 needs 0/000, authenticated
			// against its parent.
			good.grow(290)
			good.setTamper(func(path string, body []byte) []byte {
				if path == "/log/tile/0/000" {
					body = bytes.Clone(body)
					body[5*32] ^= 1
				}
				return body
			})
			return good
		}, verifier, TileMismatch},
		{"a wrong consistency proof from the ledger", func(good *testLog) *testLog {
			good.grow(5)
			good.setTamper(func(path string, body []byte) []byte {
				if path != "/v1/log/consistency-proof" {
					return body
				}
				var p api.ConsistencyProof
				if err := json.Unmarshal(body, &p); err != nil {
					t.Error(err)
				}
				p.Proof[0] = schemas.EncodeHash(make([]byte, 32))
				b, _ := json.Marshal(p)
				return b
			})
			return good
		}, verifier, Fork},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := newTestLog(t, "a", signer)
			good.grow(10)
			statePath := filepath.Join(t.TempDir(), "state.json")
			if _, err := newMonitor(t, good.srv.URL, verifier, statePath, nil, nil).Check(ctx); err != nil {
				t.Fatal(err)
			}
			before, _ := os.ReadFile(statePath)
			l := c.setup(good)
			reg := prometheus.NewRegistry()
			m := newMonitor(t, l.srv.URL, c.verifier, statePath, nil, reg)
			_, err := m.Check(ctx)
			var f *Finding
			t.Logf("%v", err)
			if !errors.As(err, &f) || f.Kind != c.want {
				t.Fatalf("want a %s finding, got %v", c.want, err)
			}
			if after, _ := os.ReadFile(statePath); !bytes.Equal(before, after) {
				t.Fatalf("the state moved past a bad checkpoint:\n%s", after)
			}
			if m.State().Size != 10 {
				t.Fatalf("the monitor's state moved to %d", m.State().Size)
			}
			if got := gauge(t, reg, "chio_monitor_findings_total", string(c.want)); got != 1 {
				t.Fatalf("findings{kind=%s} = %v", c.want, got)
			}
		})
	}
}

// Watching, a finding is logged as an error naming its kind and counted,
// and the watch goes on checking against the last good state.
func TestRunAlertsAndGoesOn(t *testing.T) {
	signer, verifier := logKey(t)
	good := newTestLog(t, "a", signer)
	good.grow(4)
	statePath := filepath.Join(t.TempDir(), "state.json")
	if _, err := newMonitor(t, good.srv.URL, verifier, statePath, nil, nil).Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	fork := newTestLog(t, "b", signer)
	fork.grow(4)
	var logs lockedBuffer
	reg := prometheus.NewRegistry()
	m, err := New(Config{URL: fork.srv.URL, Verifier: verifier, StatePath: statePath, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx, time.Millisecond) }()
	for deadline := time.Now().Add(10 * time.Second); gauge(t, reg, "chio_monitor_findings_total", string(Fork)) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no second fork finding:\n%s", logs.String())
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if out := logs.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "finding=fork") {
		t.Fatalf("no error log naming the finding:\n%s", out)
	}
	if m.State().Size != 4 || m.State().Root != schemas.EncodeHash(good.store.State().Root) {
		t.Fatalf("the state moved to %+v", m.State())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A log that cannot be read is no finding: nothing is concluded.
func TestUnreachableIsNoFinding(t *testing.T) {
	_, verifier := logKey(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close()
	m := newMonitor(t, srv.URL, verifier, filepath.Join(t.TempDir(), "state.json"), nil, nil)
	_, err := m.Check(context.Background())
	var f *Finding
	if err == nil || errors.As(err, &f) {
		t.Fatalf("want a plain error, got %v", err)
	}
}

// With a witness policy a checkpoint needs its quorum of cosignatures.
func TestWitnessQuorum(t *testing.T) {
	signer, verifier := logKey(t)
	w1, w1Key := newCosigner(t, "witness1.example")
	_, w2Key := newCosigner(t, "witness2.example")
	ctx := context.Background()
	cases := []struct {
		name, policy string
		want         Kind // "" for no finding
		cosigners    []string
	}{
		{"quorum met", "witness w1 " + w1Key + " https://w1.example\nquorum w1\n", "", []string{"w1"}},
		{"one of two", "witness w1 " + w1Key + " https://w1.example\nwitness w2 " + w2Key + " https://w2.example\ngroup g any w1 w2\nquorum g\n", "", []string{"w1"}},
		{"quorum not met", "witness w1 " + w1Key + " https://w1.example\nwitness w2 " + w2Key + " https://w2.example\ngroup g all w1 w2\nquorum g\n", BadSignature, nil},
	}
	l := newTestLog(t, "a", signer, w1)
	l.grow(3)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := witness.ParsePolicy(strings.NewReader(c.policy))
			if err != nil {
				t.Fatal(err)
			}
			res, err := newMonitor(t, l.srv.URL, verifier, filepath.Join(t.TempDir(), "state.json"), p, nil).Check(ctx)
			var f *Finding
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want == "" && fmt.Sprint(res.Witness) != fmt.Sprint(c.cosigners):
				t.Fatalf("cosigners %v, want %v", res.Witness, c.cosigners)
			case c.want != "" && (!errors.As(err, &f) || f.Kind != c.want || !strings.Contains(f.Reason, "witness")):
				t.Fatalf("want a %s finding about the witnesses, got %v", c.want, err)
			}
		})
	}
}

// The state file is written whole, and refused when it is another log's
// or not a state.
func TestStateFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if s, err := LoadState(path); s != nil || err != nil {
		t.Fatalf("missing state: %v %v", s, err)
	}
	want := &State{Type: StateType, Origin: origin, Size: 3, Root: schemas.EncodeHash(make([]byte, 32)), Checkpoint: "x", FirstSeen: time.Unix(5, 0).UTC()}
	if err := SaveState(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadState(path)
	if err != nil || *got != *want {
		t.Fatalf("%+v %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temporary files left behind: %v", entries)
	}
	_, verifier := logKey(t)
	for name, content := range map[string]string{
		"not JSON":     "{",
		"another type": `{"type":"x","origin":"` + origin + `","size":1,"root":"` + want.Root + `"}`,
		"bad root":     `{"type":"` + StateType + `","origin":"` + origin + `","size":1,"root":"00"}`,
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadState(path); err == nil {
			t.Errorf("%s: loaded", name)
		}
	}
	want.Origin = "other.example/log"
	if err := SaveState(path, want); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{URL: "http://127.0.0.1:1", Verifier: verifier, StatePath: path}); err == nil || !strings.Contains(err.Error(), "other.example/log") {
		t.Fatalf("a state of another log: %v", err)
	}
}

// The tile paths are C2SP tlog-tiles', as the ledger parses them.
func TestTilePath(t *testing.T) {
	for _, tile := range []tlog.Tile{
		{H: 8, L: 0, N: 0, W: 256}, {H: 8, L: 0, N: 0, W: 1}, {H: 8, L: 1, N: 999, W: 255},
		{H: 8, L: 2, N: 1000, W: 256}, {H: 8, L: 0, N: 1234067, W: 7},
	} {
		p := tilePath(tile)
		elems := strings.Split(p, "/")
		if elems[0] != "tile" || elems[1] != strconv.Itoa(tile.L) {
			t.Fatalf("%v: %s", tile, p)
		}
		idx, w, err := logstore.ParseTileIndex(elems[2:])
		if err != nil || idx != uint64(tile.N) || (w == 0 && tile.W != 256) || (w != 0 && w != tile.W) {
			t.Fatalf("%v: %s parses as %d %d %v", tile, p, idx, w, err)
		}
		if want := "tile/" + strconv.Itoa(tile.L) + "/" + logstore.EncodeTileIndex(uint64(tile.N)); !strings.HasPrefix(p, want) {
			t.Fatalf("%s, want %s…", p, want)
		}
	}
}

// cosigner signs C2SP cosignature/v1 lines, as a witness does.
type cosigner struct {
	name string
	hash uint32
	key  ed25519.PrivateKey
}

func newCosigner(t *testing.T, name string) (note.Signer, string) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	typed := append([]byte{0x04}, pub...)
	h := sha256.Sum256(append([]byte(name+"\n"), typed...))
	c := &cosigner{name: name, hash: binary.BigEndian.Uint32(h[:]), key: priv}
	return c, fmt.Sprintf("%s+%08x+%s", name, c.hash, base64.StdEncoding.EncodeToString(typed))
}

func (c *cosigner) Name() string    { return c.name }
func (c *cosigner) KeyHash() uint32 { return c.hash }
func (c *cosigner) Sign(msg []byte) ([]byte, error) {
	ts := uint64(time.Now().Unix())
	m := append([]byte("cosignature/v1\ntime "+strconv.FormatUint(ts, 10)+"\n"), msg...)
	return append(binary.BigEndian.AppendUint64(nil, ts), ed25519.Sign(c.key, m)...), nil
}

// gauge reads one series' value from reg (label: the value of its only
// label, or "" for none).
func gauge(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label != "" && (len(m.GetLabel()) != 1 || m.GetLabel()[0].GetValue() != label) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no series %s{%s}", name, label)
	return 0
}
