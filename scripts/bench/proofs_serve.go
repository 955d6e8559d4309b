package main

import (
	"context"
	"crypto/ed25519"
	crand "crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/chio-ledger/chio/internal/readauth"
	"github.com/chio-ledger/chio/ledger/api"
	"github.com/chio-ledger/chio/ledger/verify"
	"github.com/chio-ledger/chio/schemas"
)

// proofsServer is the ledger's read API on a loopback listener, as `chio
// ledger --service-token` serves it, and a keep-alive client for it that
// reads with that token (receipts and proofs are private).
type proofsServer struct {
	log    *proofsLog
	base   string
	token  string
	srv    *http.Server
	client *http.Client
	done   chan error
}

func serveProofs(l *proofsLog, conns int) (*proofsServer, error) {
	token := crand.Text()
	h := api.New(l.store, api.Keys{Origin: l.signer.Name(), CheckpointVKey: l.vkey,
		KernelKey: schemas.EncodePublicKey(l.kernel.Public().(ed25519.PublicKey))}, slog.New(slog.DiscardHandler),
		api.WithAuthenticator(readauth.New(readauth.WithServiceToken(token))))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proofs: listen: %w", err)
	}
	s := &proofsServer{log: l, base: "http://" + ln.Addr().String(), token: token, done: make(chan error, 1),
		srv: &http.Server{Handler: api.NewServer(h), ReadHeaderTimeout: 10 * time.Second},
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: conns, MaxIdleConnsPerHost: conns, DisableCompression: true, IdleConnTimeout: time.Minute}}}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

func (s *proofsServer) close(ctx context.Context) error {
	s.client.CloseIdleConnections()
	if err := s.srv.Shutdown(ctx); err != nil {
		return fmt.Errorf("proofs: stop server: %w", err)
	}
	if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("proofs: server: %w", err)
	}
	return nil
}

// get fetches path with the service token and returns the body; anything
// but 200 is an error, so a broken endpoint fails the run instead of being
// timed.
func (s *proofsServer) get(ctx context.Context, path string, keep bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return nil, fmt.Errorf("proofs: request %s: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("proofs: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	var body []byte
	if keep || resp.StatusCode != http.StatusOK {
		body, err = io.ReadAll(resp.Body)
	} else {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	if err != nil {
		return nil, fmt.Errorf("proofs: read GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("proofs: GET %s: %s: %s", path, resp.Status, body)
	}
	return body, nil
}

func proofsPath(id string) string { return "/v1/receipts/" + id + "/inclusion-proof" }

// proofsStep is what one log size measured.
type proofsStep struct {
	size       uint64
	build      time.Duration
	settle     time.Duration // waited for background compactions before measuring
	built      uint64        // leaves appended in this step
	disk       int64
	c1         Latencies
	load       Latencies
	loadTook   time.Duration
	loadCPU    time.Duration // process CPU time during the load step (server and client)
	pathMin    int
	pathMax    int
	verified   int
	profileOut string
}

// measure times proofs at concurrency 1, then under load with workers
// goroutines, then verifies a sample of served proofs end to end.
func (s *proofsServer) measure(ctx context.Context, st *proofsStep, requests, workers int, span time.Duration, profile string) error {
	n := len(s.log.ids)
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	// Warm-up: open the load step's connections and touch the code paths.
	if err := s.load(ctx, st.size, workers, 100*time.Millisecond, nil); err != nil {
		return err
	}
	const samples = 32
	type sample struct {
		index uint64
		proof []byte
	}
	var kept []sample
	every := max(requests/samples, 1)
	st.c1 = make(Latencies, 0, requests)
	for i := range requests {
		idx := rng.Uint64N(uint64(n))
		keep := i%every == 0
		t0 := time.Now()
		body, err := s.get(ctx, proofsPath(s.log.ids[idx].String()), keep)
		st.c1 = append(st.c1, time.Since(t0))
		if err != nil {
			return err
		}
		if keep {
			kept = append(kept, sample{idx, body})
		}
	}

	var stop func()
	if profile != "" {
		f, err := os.Create(profile)
		if err != nil {
			return fmt.Errorf("proofs: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("proofs: cpu profile: %w", err)
		}
		stop = pprof.StopCPUProfile
		st.profileOut = profile
	}
	cpu0 := proofsCPU()
	t0 := time.Now()
	err := s.load(ctx, st.size, workers, span, &st.load)
	st.loadTook = time.Since(t0)
	st.loadCPU = proofsCPU() - cpu0
	if stop != nil {
		stop()
	}
	if err != nil {
		return err
	}

	st.pathMin, st.pathMax = 1<<30, 0
	for _, k := range kept {
		plen, err := s.verify(ctx, k.index, st.size, k.proof)
		if err != nil {
			return err
		}
		st.pathMin, st.pathMax = min(st.pathMin, plen), max(st.pathMax, plen)
		st.verified++
	}
	return nil
}

// load runs workers goroutines requesting proofs of random leaves for
// span; their latencies go to out when it is not nil.
func (s *proofsServer) load(ctx context.Context, size uint64, workers int, span time.Duration, out *Latencies) error {
	n := uint64(len(s.log.ids))
	deadline := time.Now().Add(span)
	lat := make([]Latencies, workers)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(size, uint64(w)+2))
			for time.Now().Before(deadline) {
				id := s.log.ids[rng.Uint64N(n)].String()
				t0 := time.Now()
				if _, err := s.get(ctx, proofsPath(id), false); err != nil {
					errs[w] = err
					return
				}
				lat[w] = append(lat[w], time.Since(t0))
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if out != nil {
		for _, l := range lat {
			*out = append(*out, l...)
		}
	}
	return nil
}

// verify checks one served proof the way an auditor would (ledger/verify:
// receipt signature, checkpoint signature, leaf hash, audit path to the
// checkpoint root) and that it is for the leaf asked, in the tree of the
// size served. It returns the audit path's length.
func (s *proofsServer) verify(ctx context.Context, index, size uint64, proofBody []byte) (int, error) {
	id := s.log.ids[index].String()
	var p api.InclusionProof
	if err := json.Unmarshal(proofBody, &p); err != nil {
		return 0, fmt.Errorf("proofs: decode proof of leaf %d: %w", index, err)
	}
	receipt, err := s.get(ctx, "/v1/receipts/"+id, true)
	if err != nil {
		return 0, err
	}
	res, err := verify.Verify(verify.Inputs{Receipt: receipt, Proof: proofBody, Checkpoint: []byte(p.Checkpoint),
		VKey: s.log.vkey, KernelKey: schemas.EncodePublicKey(s.log.kernel.Public().(ed25519.PublicKey))})
	if err != nil {
		return 0, fmt.Errorf("proofs: proof of leaf %d (%s) does not verify: %w", index, id, err)
	}
	if res.LeafIndex != index || res.TreeSize != size || res.ReceiptID != id {
		return 0, fmt.Errorf("proofs: proof of leaf %d in a tree of %d is for leaf %d (%s) in a tree of %d", index, size, res.LeafIndex, res.ReceiptID, res.TreeSize)
	}
	return len(p.AuditPath), nil
}

// proofsCPU is the process's user and system CPU time so far.
func proofsCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// proofsDiskUsage sums the sizes of the files under dir.
func proofsDiskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // Pebble removed it (a compaction) while we walked
		}
		if err != nil {
			return err
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("proofs: disk usage of %s: %w", dir, err)
	}
	return total, nil
}

// proofsFreeSpace is the space left for an unprivileged writer on dir's disk.
func proofsFreeSpace(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}
