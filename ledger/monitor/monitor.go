// Package monitor watches a Chio ledger's public log from outside, with no
// credential: it verifies each signed checkpoint against the pinned log
// key (and, with a witness policy, its cosignature quorum), recomputes the
// checkpoint's root from the public hash tiles, and checks that the log
// only ever grows from the last checkpoint it verified, with a consistency
// proof computed from the tiles and the one the ledger serves, which must
// agree. What it verified is kept in a state file, so a restart does not
// forget what the log committed to.
package monitor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	tlogfmt "github.com/transparency-dev/formats/log"
	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/witness"
	"github.com/chio-ledger/chio/schemas"
)

// Kind is the kind of a finding: what the log did wrong.
type Kind string

// The findings. Each means the log (or whoever serves it) misbehaved, or
// the pinned key is not the log's.
const (
	// Fork: a checkpoint of the verified size with another root, or one
	// that no valid consistency proof links to the verified checkpoint.
	Fork Kind = "fork"
	// Rollback: a checkpoint smaller than the one verified before.
	Rollback Kind = "rollback"
	// BadSignature: the checkpoint does not verify with the pinned log key
	// (or its origin is not the key's name, or it is malformed), or its
	// cosignatures do not meet the witness policy's quorum.
	BadSignature Kind = "bad_signature"
	// TileMismatch: the public hash tiles do not give the checkpoint's root.
	TileMismatch Kind = "tile_mismatch"
)

// Kinds returns every kind, in a new slice each call: no caller can change
// what another sees.
func Kinds() []Kind { return []Kind{Fork, Rollback, BadSignature, TileMismatch} }

// Finding is a check's verdict that the log misbehaved. A check that could
// not read the log returns another error, which concludes nothing.
type Finding struct {
	Kind   Kind
	Reason string // says what was wrong, with Err's text when there is one
	// Err, when set, is the error the verdict rests on (a failed proof, a
	// malformed answer), kept so errors.Is and errors.As reach it.
	Err error
}

func (f *Finding) Error() string { return string(f.Kind) + ": " + f.Reason }

func (f *Finding) Unwrap() error { return f.Err }

// Config configures a Monitor.
type Config struct {
	// URL is the ledger's base URL: /log/checkpoint, /log/tile/… and
	// /v1/log/consistency-proof are under it.
	URL string
	// Verifier is the pinned log key; its name is the log's origin.
	Verifier note.Verifier
	// Policy, if set, is the witness policy whose quorum of cosignatures
	// every checkpoint must carry.
	Policy *witness.Policy
	// StatePath is the state file (see State).
	StatePath string
	// HTTPClient defaults to one with a 30s timeout.
	HTTPClient *http.Client
	Logger     *slog.Logger
	// Registerer, if set, gets the monitor's metrics.
	Registerer prometheus.Registerer
	// Now defaults to time.Now.
	Now func() time.Time
}

// Monitor checks one log. Check and Run are not meant to run concurrently.
type Monitor struct {
	base      string
	verifier  note.Verifier
	policy    *witness.Policy
	statePath string
	hc        *http.Client
	log       *slog.Logger
	now       func() time.Time
	metrics   *metrics

	mu    sync.Mutex // guards state, read by the age metric at scrape time
	state *State
}

// New loads the state file and returns a monitor.
func New(cfg Config) (*Monitor, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("new monitor: url %q: want http(s)://host[/prefix]", cfg.URL)
	}
	if cfg.Verifier == nil || cfg.StatePath == "" {
		return nil, errors.New("new monitor: need a log verifier and a state path")
	}
	st, err := LoadState(cfg.StatePath)
	if err != nil {
		return nil, err
	}
	if st != nil && st.Origin != cfg.Verifier.Name() {
		return nil, fmt.Errorf("new monitor: state %s is for log %q, the pinned key is for %q", cfg.StatePath, st.Origin, cfg.Verifier.Name())
	}
	m := &Monitor{base: strings.TrimSuffix(cfg.URL, "/"), verifier: cfg.Verifier, policy: cfg.Policy, statePath: cfg.StatePath,
		hc: cfg.HTTPClient, log: cfg.Logger, now: cfg.Now, state: st}
	if m.hc == nil {
		m.hc = &http.Client{Timeout: 30 * time.Second}
	}
	if m.log == nil {
		m.log = slog.Default()
	}
	if m.now == nil {
		m.now = time.Now
	}
	m.metrics = newMetrics(cfg.Registerer, m.age)
	if st != nil {
		m.metrics.size.Set(float64(st.Size))
	}
	return m, nil
}

// State returns the last verified checkpoint, nil before the first.
func (m *Monitor) State() *State {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == nil {
		return nil
	}
	s := *m.state
	return &s
}

func (m *Monitor) age() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state == nil {
		return 0
	}
	return max(0, m.now().Sub(m.state.FirstSeen).Seconds())
}

// Result is a check that found nothing wrong.
type Result struct {
	Size     uint64
	Root     []byte
	Previous *State   // the state it was checked against; nil on a first run
	Witness  []string // the policy's witnesses that cosigned, by policy name
}

// Check fetches the latest checkpoint and verifies it: its signatures, its
// root against the hash tiles, and that it extends the last verified
// checkpoint. Only then does the state advance to it. A *Finding error
// means the log misbehaved; any other error, that the check could not be
// completed.
func (m *Monitor) Check(ctx context.Context) (*Result, error) {
	res, err := m.check(ctx)
	var f *Finding
	switch {
	case errors.As(err, &f):
		m.metrics.checks.WithLabelValues("finding").Inc()
		m.metrics.findings.WithLabelValues(string(f.Kind)).Inc()
	case err != nil:
		m.metrics.checks.WithLabelValues("error").Inc()
	default:
		m.metrics.checks.WithLabelValues("ok").Inc()
		m.metrics.size.Set(float64(res.Size))
	}
	return res, err
}

func (m *Monitor) check(ctx context.Context) (*Result, error) {
	signed, err := m.get(ctx, "/log/checkpoint", maxCheckpoint)
	if err != nil {
		return nil, fmt.Errorf("fetch checkpoint: %w", err)
	}
	cp, cosigners, err := m.open(signed)
	if err != nil {
		return nil, err
	}
	prev := m.State()
	res := &Result{Size: cp.Size, Root: cp.Hash, Previous: prev, Witness: cosigners}
	var prevRoot []byte
	if prev != nil {
		prevRoot, _ = prev.root() // checked when loaded
		switch {
		case cp.Size < prev.Size:
			return nil, &Finding{Kind: Rollback, Reason: fmt.Sprintf("the log's checkpoint has size %d, smaller than the size %d verified before", cp.Size, prev.Size)}
		case cp.Size == prev.Size && !bytes.Equal(cp.Hash, prevRoot):
			return nil, &Finding{Kind: Fork, Reason: fmt.Sprintf("the log's checkpoint of size %d has root %s, the one verified before has root %s", cp.Size, schemas.EncodeHash(cp.Hash), prev.Root)}
		}
	}
	tr := m.newTileReader(ctx)
	if err := m.checkRoot(tr, cp); err != nil {
		return nil, err
	}
	if prev != nil && prev.Size > 0 && cp.Size > prev.Size {
		if err := m.checkConsistency(ctx, tr, cp, prev.Size, prevRoot); err != nil {
			return nil, err
		}
	}
	if prev != nil && prev.Size == cp.Size {
		return res, nil // nothing new: the state keeps when it was first seen
	}
	next := &State{Type: StateType, Origin: cp.Origin, Size: cp.Size, Root: schemas.EncodeHash(cp.Hash),
		Checkpoint: string(signed), FirstSeen: m.now().UTC()}
	if err := SaveState(m.statePath, next); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.state = next
	m.mu.Unlock()
	return res, nil
}

// Bounds on what the log may send: a checkpoint with a few cosignatures,
// a consistency proof of at most 64 hashes.
const (
	maxCheckpoint       = 64 << 10
	maxConsistencyProof = 64 << 10
)

// open verifies a signed checkpoint with the pinned key, and the witness
// quorum if there is a policy.
func (m *Monitor) open(signed []byte) (*tlogfmt.Checkpoint, []string, error) {
	bad := func(err error) error {
		return &Finding{Kind: BadSignature, Reason: fmt.Sprintf("the checkpoint does not verify with the pinned key %s: %v", m.verifier.Name(), err), Err: err}
	}
	text := ""
	var cosigners []string
	if m.policy != nil {
		n, names, err := witness.VerifyCheckpoint(signed, m.verifier, m.policy)
		if errors.Is(err, witness.ErrQuorum) {
			return nil, nil, &Finding{Kind: BadSignature, Reason: fmt.Sprintf("the checkpoint's cosignatures do not meet the witness policy: %v", err), Err: err}
		}
		if err != nil {
			return nil, nil, bad(err)
		}
		text, cosigners = n.Text, names
	} else {
		n, err := note.Open(signed, note.VerifierList(m.verifier))
		if err != nil {
			return nil, nil, bad(err)
		}
		text = n.Text
	}
	var cp tlogfmt.Checkpoint
	if _, err := cp.Unmarshal([]byte(text)); err != nil {
		return nil, nil, bad(err)
	}
	if cp.Origin != m.verifier.Name() {
		return nil, nil, bad(fmt.Errorf("origin %q is not the key's name", cp.Origin))
	}
	if len(cp.Hash) != sha256.Size {
		return nil, nil, bad(fmt.Errorf("root hash of %d bytes", len(cp.Hash)))
	}
	return &cp, cosigners, nil
}

// checkRoot recomputes the checkpoint's root from the hash tiles.
func (m *Monitor) checkRoot(tr *tileReader, cp *tlogfmt.Checkpoint) error {
	var got []byte
	if cp.Size == 0 {
		empty := sha256.Sum256(nil) // RFC 6962: the empty tree's root
		got = empty[:]
	} else {
		h, err := tlog.TreeHash(int64(cp.Size), tr.unauthenticated(int64(cp.Size)))
		if err != nil {
			return tileError("recompute the root from the tiles", err)
		}
		got = h[:]
	}
	if !bytes.Equal(got, cp.Hash) {
		return &Finding{Kind: TileMismatch, Reason: fmt.Sprintf("the hash tiles give root %s for size %d, the checkpoint says %s",
			schemas.EncodeHash(got), cp.Size, schemas.EncodeHash(cp.Hash))}
	}
	return nil
}

// checkConsistency proves from the tiles that the checkpoint extends the
// verified tree (from, fromRoot), and checks the ledger's own proof too.
func (m *Monitor) checkConsistency(ctx context.Context, tr *tileReader, cp *tlogfmt.Checkpoint, from uint64, fromRoot []byte) error {
	to := int64(cp.Size)
	th, oh := tlog.Hash(cp.Hash), tlog.Hash(fromRoot)
	// The tile hash reader authenticates every tile it reads against the
	// checkpoint's root, so the proof is built only from hashes it commits to.
	proof, err := tlog.ProveTree(to, int64(from), tlog.TileHashReader(tlog.Tree{N: to, Hash: th}, tr))
	if err != nil {
		return tileError("prove consistency from the tiles", err)
	}
	if err := tlog.CheckTree(proof, to, th, int64(from), oh); err != nil {
		return &Finding{Kind: Fork, Reason: fmt.Sprintf("the tree of size %d (root %s) does not extend the tree of size %d verified before (root %s): the tiles' consistency proof fails: %v",
			cp.Size, schemas.EncodeHash(cp.Hash), from, schemas.EncodeHash(fromRoot), err), Err: err}
	}
	served, err := m.consistencyProof(ctx, from, cp.Size)
	if err != nil {
		return err
	}
	if err := tlog.CheckTree(served, to, th, int64(from), oh); err != nil {
		return &Finding{Kind: Fork, Reason: fmt.Sprintf("the ledger's consistency proof from size %d to %d fails: %v", from, cp.Size, err), Err: err}
	}
	if !equalProofs(proof, served) {
		return &Finding{Kind: Fork, Reason: fmt.Sprintf("the ledger's consistency proof from size %d to %d differs from the one the tiles give", from, cp.Size)}
	}
	return nil
}

func equalProofs(a, b tlog.TreeProof) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// consistencyProof reads /v1/log/consistency-proof.
func (m *Monitor) consistencyProof(ctx context.Context, from, to uint64) (tlog.TreeProof, error) {
	path := "/v1/log/consistency-proof?from=" + strconv.FormatUint(from, 10) + "&to=" + strconv.FormatUint(to, 10)
	b, err := m.get(ctx, path, maxConsistencyProof)
	if err != nil {
		return nil, fmt.Errorf("fetch consistency proof: %w", err)
	}
	var body api.ConsistencyProof
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, &Finding{Kind: Fork, Reason: fmt.Sprintf("the ledger's consistency proof from size %d to %d is not JSON: %v", from, to, err), Err: err}
	}
	if body.From != from || body.To != to {
		return nil, &Finding{Kind: Fork, Reason: fmt.Sprintf("asked for a consistency proof from size %d to %d, the ledger answered one from %d to %d", from, to, body.From, body.To)}
	}
	p := make(tlog.TreeProof, len(body.Proof))
	for i, s := range body.Proof {
		h, err := schemas.ParseHash(s)
		if err != nil {
			return nil, &Finding{Kind: Fork, Reason: fmt.Sprintf("the ledger's consistency proof from size %d to %d: %v", from, to, err), Err: err}
		}
		p[i] = tlog.Hash(h)
	}
	return p, nil
}

// tileError sorts an error of sumdb/tlog over the tile reader: the log
// could not be read (no conclusion), or what it served is wrong.
func tileError(op string, err error) error {
	var f *Finding
	var fe *fetchError
	if errors.As(err, &f) || errors.As(err, &fe) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return &Finding{Kind: TileMismatch, Reason: fmt.Sprintf("%s: %v", op, err), Err: err}
}

// fetchError is a failure to read the log: the network, or an answer
// other than 200.
type fetchError struct {
	path string
	err  error
}

func (e *fetchError) Error() string { return "GET " + e.path + ": " + e.err.Error() }
func (e *fetchError) Unwrap() error { return e.err }

// get reads a public path of the log, at most limit bytes of it.
func (m *Monitor) get(ctx context.Context, path string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.base+path, nil)
	if err != nil {
		return nil, &fetchError{path, err}
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, &fetchError{path, err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, &fetchError{path, fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &fetchError{path, fmt.Errorf("status %d: %s", resp.StatusCode, snippet(b))}
	}
	return b, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}

// Run checks every interval until ctx ends. A finding is logged as an
// error with finding=<kind> and counted; the state stays at the last good
// checkpoint, so the next check compares against it again.
func (m *Monitor) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("monitor run: interval %v is not positive", interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		m.runOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (m *Monitor) runOnce(ctx context.Context) {
	res, err := m.Check(ctx)
	var f *Finding
	switch {
	case errors.As(err, &f):
		attrs := []any{"finding", string(f.Kind), "reason", f.Reason, "url", m.base}
		if s := m.State(); s != nil {
			attrs = append(attrs, "verified_size", s.Size, "verified_root", s.Root)
		}
		m.log.Error("log monitor finding", attrs...)
	case err != nil && ctx.Err() == nil:
		m.log.Warn("log monitor check failed", "url", m.base, "err", err)
	case err == nil:
		m.log.Debug("log monitor verified checkpoint", "url", m.base, "size", res.Size, "root", schemas.EncodeHash(res.Root))
	}
}
