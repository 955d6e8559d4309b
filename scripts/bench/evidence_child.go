package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chio-ledger/chio/ledger/evidence"
)

// evidenceChildEnv carries an evidenceJob to this binary re-executed: the
// export and the verify each run in a process of their own, so that the
// memory measured is theirs and not the ledger's beside them.
const evidenceChildEnv = "CHIO_BENCH_EVIDENCE_CHILD"

// The child is dispatched from init so that the same works for the bench
// command and for its test binary (go test -short runs the section too).
func init() {
	if job := os.Getenv(evidenceChildEnv); job != "" {
		os.Exit(evidenceChildMain(job))
	}
}

// evidenceJob is what one child does.
type evidenceJob struct {
	Mode      string // "export" or "verify"
	Base      string `json:",omitempty"`
	Token     string `json:",omitempty"`
	Dir       string
	VKey      string `json:",omitempty"`
	KernelKey string `json:",omitempty"`
	Profile   string `json:",omitempty"` // a CPU profile of the work, when set
}

// evidenceResult is what one child measured, written to its stdout.
type evidenceResult struct {
	Receipts  uint64
	TreeSize  uint64
	Wall      time.Duration
	CPU       time.Duration // the child's user+system time during the work
	PeakHeap  uint64        // the largest HeapInuse sampled
	PeakLive  uint64        // the largest live heap sampled (marked by the last GC)
	PeakRSS   uint64        // VmHWM at the end
	StartRSS  uint64        // VmRSS before the work
	Allocated uint64        // heap bytes allocated during the work
}

func (r *evidenceResult) rate() float64 { return float64(r.Receipts) / r.Wall.Seconds() }

// runEvidenceChild runs job in this binary re-executed and returns what
// it measured.
func runEvidenceChild(ctx context.Context, job evidenceJob) (*evidenceResult, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("evidence: this binary: %w", err)
	}
	b, err := json.Marshal(job)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), evidenceChildEnv+"="+string(b))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("evidence: %s child: %w\n%s", job.Mode, err, stderr.Bytes())
	}
	var res evidenceResult
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, fmt.Errorf("evidence: %s child's answer %q: %w\n%s", job.Mode, stdout.Bytes(), err, stderr.Bytes())
	}
	return &res, nil
}

// evidenceChildMain does the job and prints the result; it returns the
// exit status.
func evidenceChildMain(raw string) int {
	var job evidenceJob
	if err := json.Unmarshal([]byte(raw), &job); err != nil {
		fmt.Fprintln(os.Stderr, "evidence child: job:", err)
		return 2
	}
	res, err := evidenceChildRun(job)
	if err != nil {
		fmt.Fprintln(os.Stderr, "evidence child:", err)
		return 1
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "evidence child:", err)
		return 1
	}
	return 0
}

func evidenceChildRun(job evidenceJob) (*evidenceResult, error) {
	res := &evidenceResult{StartRSS: procStatusBytes("VmRSS")}
	if job.Profile != "" {
		f, err := os.Create(job.Profile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	sampler := startHeapSampler(5 * time.Millisecond)
	alloc0 := heapAllocated()
	cpu0, t0 := proofsCPU(), time.Now()
	switch job.Mode {
	case "export":
		c := &evidence.Client{Base: job.Base, HTTP: &http.Client{Timeout: 2 * time.Minute}, Token: job.Token}
		q, err := evidence.Export(context.Background(), c, job.Dir, evidence.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			sampler.stop()
			return nil, err
		}
		res.Receipts, res.TreeSize = q.Receipts, q.TreeSize
	case "verify":
		rep, err := evidence.Verify(job.Dir, evidence.VerifyOptions{VKey: job.VKey, KernelKey: job.KernelKey})
		if err != nil {
			sampler.stop()
			return nil, err
		}
		res.Receipts, res.TreeSize = uint64(rep.Receipts), rep.TreeSize
	default:
		sampler.stop()
		return nil, fmt.Errorf("mode %q", job.Mode)
	}
	res.Wall, res.CPU = time.Since(t0), proofsCPU()-cpu0
	res.Allocated = heapAllocated() - alloc0
	res.PeakHeap, res.PeakLive = sampler.stop()
	res.PeakRSS = procStatusBytes("VmHWM")
	if res.PeakRSS == 0 {
		return nil, errors.New("no VmHWM in /proc/self/status")
	}
	return res, nil
}

// heapSampler keeps the largest HeapInuse and live heap seen.
type heapSampler struct {
	done        chan struct{}
	wg          sync.WaitGroup
	inuse, live uint64
}

func startHeapSampler(every time.Duration) *heapSampler {
	s := &heapSampler{done: make(chan struct{})}
	s.read()
	s.wg.Go(func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.read()
			}
		}
	})
	return s
}

// stop ends the sampling and returns the peaks, the last reading included.
func (s *heapSampler) stop() (inuse, live uint64) {
	close(s.done)
	s.wg.Wait()
	s.read()
	return s.inuse, s.live
}

// read takes one sample: HeapInuse as runtime.MemStats counts it (bytes
// in spans holding objects, live or not yet swept, and their unused
// slots), without stopping the world, and the heap the last GC found
// live.
func (s *heapSampler) read() {
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(m)
	s.inuse = max(s.inuse, m[0].Value.Uint64()+m[1].Value.Uint64())
	s.live = max(s.live, m[2].Value.Uint64())
}

func heapAllocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// procStatusBytes reads a "kB" field of /proc/self/status (VmRSS, VmHWM)
// in bytes; 0 when there is none.
func procStatusBytes(field string) uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != field {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}
