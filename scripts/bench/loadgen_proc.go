package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the user+system CPU a process has used so far, read from
// /proc (Linux); with no such file it is zero, and the CPU figures read
// "n/a".
func cpuTime(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the whole line, in clock ticks (USER_HZ, 100
	// on Linux).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+st) * 10 * time.Millisecond
}

// selfCPU is this process's CPU time: the load generator's cost.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fmtCPU formats CPU time per request.
func fmtCPU(cpu time.Duration, requests int) string {
	if cpu <= 0 || requests == 0 {
		return "n/a"
	}
	return fmtDur(cpu / time.Duration(requests))
}

// logSize reads the tree size from a ledger's /log/checkpoint (its second
// line).
func logSize(ctx context.Context, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/log/checkpoint", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer drainBody(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("checkpoint: HTTP %d", resp.StatusCode)
	}
	sc := bufio.NewScanner(resp.Body)
	for i := 0; sc.Scan(); i++ {
		if i == 1 {
			n, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			if err != nil {
				return 0, fmt.Errorf("checkpoint size %q: %w", sc.Text(), err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("checkpoint: no size line")
}

// waitLogSize polls the ledger until its log holds want entries: the
// receipts of a run are signed asynchronously, and that backlog must not
// spill into the next measurement. It returns how long that took.
func waitLogSize(ctx context.Context, base string, want int, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		n, err := logSize(ctx, base)
		if err == nil && n >= want {
			return time.Since(start), nil
		}
		if time.Since(start) > limit {
			if err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("ledger holds %d of %d receipts after %s", n, want, limit)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			drainBody(resp.Body)
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s: %w", url, limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
