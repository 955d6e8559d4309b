package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// readBurst is -read-burst: concurrent readers, each paging through the
// whole log with limit=200 pages, rounds times.
type readBurst struct {
	readers, rounds int
}

func (b *readBurst) String() string {
	if b.readers == 0 {
		return ""
	}
	return fmt.Sprintf("%dx%d", b.readers, b.rounds)
}

func (b *readBurst) Set(s string) error {
	r, n, ok := strings.Cut(s, "x")
	var err1, err2 error
	b.readers, err1 = strconv.Atoi(r)
	b.rounds, err2 = strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || b.readers < 1 || b.rounds < 1 {
		return fmt.Errorf("want READERSxROUNDS, such as 32x2")
	}
	return nil
}

// burstResult is what a read burst measured.
type burstResult struct {
	burst           readBurst
	before, peak    int64 // RSS before, VmHWM during (reset first)
	pages, receipts int
	took            time.Duration
	err             error
}

// runReadBurst resets chio up's peak RSS (clear_refs 5), runs the burst
// with the operator token (an auditor's reads: every tenant's receipts),
// and reads the peak back.
func runReadBurst(ctx context.Context, up *chioUp, pid int, b readBurst) burstResult {
	res := burstResult{burst: b}
	tok, err := os.ReadFile(filepath.Join(up.dataDir, "operator.token"))
	if err != nil {
		res.err = fmt.Errorf("operator token: %w", err)
		return res
	}
	token := strings.TrimSpace(string(tok))
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	res.before, _ = procStatusBytes(pid, "VmRSS")
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range b.readers {
		wg.Go(func() {
			pages, receipts := 0, 0
			var err error
			for range b.rounds {
				var cursor *uint64
				for {
					q := url.Values{"limit": {"200"}}
					if cursor != nil {
						q.Set("cursor", strconv.FormatUint(*cursor, 10))
					}
					var p *queryPage
					if p, err = queryReceipts(ctx, up.base, token, q); err != nil {
						break
					}
					pages, receipts = pages+1, receipts+len(p.Receipts)
					if p.NextCursor == nil {
						break
					}
					cursor = p.NextCursor
				}
				if err != nil {
					break
				}
			}
			mu.Lock()
			res.pages, res.receipts = res.pages+pages, res.receipts+receipts
			if err != nil && res.err == nil {
				res.err = err
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	res.peak, _ = procStatusBytes(pid, "VmHWM")
	return res
}

func (r burstResult) text() string {
	mib := func(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
	s := fmt.Sprintf("Read burst %s (each reader pages through the whole log, 200 receipts a page, with the operator token): %d pages, %d receipts in %s; RSS %s before, peak %s during (%.2f×).",
		r.burst.String(), r.pages, r.receipts, r.took.Round(time.Millisecond), mib(r.before), mib(r.peak), float64(r.peak)/float64(max(r.before, 1)))
	if r.err != nil {
		s += fmt.Sprintf(" Error: %v.", r.err)
	}
	return s
}
