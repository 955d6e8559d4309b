package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// logSize is the size of the log's latest signed checkpoint (0 before the first).
func logSize(ctx context.Context, base string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/log/checkpoint", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return 0, nil // an empty log, before its first checkpoint is signed
	}
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

// receiptCheck is what the log held at the end.
type receiptCheck struct {
	baseline  int // log size before the load
	logSize   int // after the load, once settled
	governed  int // calls the kernel decided, as the clients saw
	uncertain int // failed calls that may or may not have a receipt
	waited    time.Duration
	queried   int            // receipts the query API listed
	byServer  map[string]int // of the load's receipts, by tool_server
	byVerdict map[string]int
	answered  int // receipt ids calls were answered with
	tasks     int // A2A tasks of governed calls
	missing   []string
	problems  []string
}

// verifyReceipts waits until the ledger has signed a receipt for every
// governed call, then reads every receipt back through the query API with
// the operator token chio up wrote: the log must hold exactly one receipt
// per governed call (up to the calls whose failure leaves it open) and
// every receipt id a call was answered with.
func verifyReceipts(ctx context.Context, up *chioUp, baseline int, res *result, tasks []string, taskState func(ctx context.Context, id string) string) receiptCheck {
	c := receiptCheck{baseline: baseline, byServer: map[string]int{}, byVerdict: map[string]int{}, answered: len(res.receiptIDs)}
	for _, n := range res.governed {
		c.governed += n
	}
	for _, n := range res.errors {
		c.uncertain += n
	}
	fail := func(format string, args ...any) receiptCheck {
		c.problems = append(c.problems, fmt.Sprintf(format, args...))
		return c
	}
	want := baseline + c.governed
	start := time.Now()
	// The ledger signs asynchronously: wait for the governed calls (until
	// the log stops growing for a minute), then a little longer, so that
	// a receipt too many would show.
	var err error
	last, lastGrew := -1, time.Now()
	for {
		c.logSize, err = logSize(ctx, up.base)
		if err == nil && c.logSize >= want {
			break
		}
		if c.logSize != last {
			last, lastGrew = c.logSize, time.Now()
		}
		if ctx.Err() != nil || time.Since(lastGrew) > time.Minute {
			c.problems = append(c.problems, fmt.Sprintf("the log holds %d receipts, want %d (%d before the load + %d governed calls); it stopped growing (%v)", c.logSize, want, baseline, c.governed, err))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	c.waited = time.Since(start)
	time.Sleep(2 * time.Second)
	if c.logSize, err = logSize(ctx, up.base); err != nil {
		return fail("%v", err)
	}
	got := c.logSize - baseline
	if len(c.problems) == 0 && (got < c.governed || got > c.governed+c.uncertain) {
		c.problems = append(c.problems, fmt.Sprintf("the log gained %d receipts for %d governed calls (%d failed calls may or may not have one)", got, c.governed, c.uncertain))
	}

	tok, err := os.ReadFile(filepath.Join(up.dataDir, "operator.token"))
	if err != nil {
		return fail("operator token: %v", err)
	}
	op := strings.TrimSpace(string(tok))
	seen := make(map[string]bool, c.logSize)
	taskSeen := make(map[string]bool, len(tasks))
	cursor := ""
	total := -1
	for {
		q := url.Values{"limit": {"200"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		page, err := queryReceipts(ctx, up.base, op, q)
		if err != nil {
			return fail("%v", err)
		}
		if total < 0 {
			total = int(page.TotalCount)
		}
		for i, raw := range page.Receipts {
			var r struct {
				ID         string `json:"id"`
				ToolServer string `json:"tool_server"`
				Decision   struct {
					Verdict string `json:"verdict"`
				} `json:"decision"`
				Unreadable string `json:"unreadable"`
				Metadata   struct {
					A2A struct {
						TaskID string `json:"taskId"`
					} `json:"a2a"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(raw, &r); err != nil || r.ID == "" {
				return fail("receipt query: item %d of a page is not a receipt: %.200s", i, raw)
			}
			if r.Unreadable != "" {
				c.problems = append(c.problems, fmt.Sprintf("receipt %s is unreadable: %s", r.ID, r.Unreadable))
			}
			if seen[r.ID] {
				c.problems = append(c.problems, "receipt "+r.ID+" listed twice")
			}
			seen[r.ID] = true
			if t := r.Metadata.A2A.TaskID; t != "" {
				taskSeen[t] = true
			}
			c.byServer[r.ToolServer]++
			c.byVerdict[r.Decision.Verdict]++
		}
		if page.NextCursor == nil || len(page.Receipts) == 0 {
			break
		}
		cursor = strconv.FormatUint(*page.NextCursor, 10)
	}
	c.queried = len(seen)
	if total != c.logSize || c.queried != c.logSize {
		c.problems = append(c.problems, fmt.Sprintf("the query API lists %d receipts (totalCount %d), the checkpoint %d", c.queried, total, c.logSize))
	}
	for _, id := range res.receiptIDs {
		if !seen[id] {
			c.missing = append(c.missing, id)
		}
	}
	// Every A2A task a governed call created has its receipt; name the
	// first few that have none, with the state chio reports for them.
	var noReceipt []string
	for _, t := range tasks {
		if !taskSeen[t] {
			noReceipt = append(noReceipt, t)
		}
	}
	if len(noReceipt) > 0 {
		var named []string
		for _, t := range noReceipt[:min(len(noReceipt), 5)] {
			named = append(named, t+" ("+taskState(ctx, t)+")")
		}
		c.problems = append(c.problems, fmt.Sprintf("%d of %d A2A tasks have no receipt in the log: %s", len(noReceipt), len(tasks), strings.Join(named, ", ")))
	}
	c.tasks = len(tasks)
	if len(c.missing) > 0 {
		c.problems = append(c.problems, fmt.Sprintf("%d receipt ids calls were answered with are not in the log (first: %s)", len(c.missing), c.missing[0]))
	}
	return c
}

type queryPage struct {
	TotalCount uint64            `json:"totalCount"`
	NextCursor *uint64           `json:"nextCursor"`
	Receipts   []json.RawMessage `json:"receipts"`
}

func queryReceipts(ctx context.Context, base, token string, q url.Values) (*queryPage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/receipts/query?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("receipt query: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return nil, fmt.Errorf("receipt query: HTTP %d %s", resp.StatusCode, b)
	}
	var p queryPage
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		return nil, fmt.Errorf("receipt query: %w", err)
	}
	return &p, nil
}
