package api

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/chio-ledger/chio/internal/readauth"
)

// One principal's heavy reads run a few at a time, the rest waiting their
// turn; another principal's are not held behind them.
func TestHeavyReadsQueuePerPrincipal(t *testing.T) {
	tn := newTenants(t)
	q := &heavyReads{max: 2}
	var running, most atomic.Int32
	release := make(chan struct{})
	e := echo.New()
	deny := func(c echo.Context, err *readauth.Error) error { return c.NoContent(err.Status) }
	e.GET("/heavy", func(c echo.Context) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		if readauth.From(c).LimitKey() == "service" {
			<-release
		}
		return c.NoContent(http.StatusOK)
	}, readauth.Middleware(tn.auth, deny), q.middleware)
	srv := httptest.NewServer(e)
	defer srv.Close()
	get := func(token string) int {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/heavy", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			if code := get(operatorToken); code != http.StatusOK {
				t.Errorf("a queued read: %d", code)
			}
		})
	}
	for deadline := time.Now().Add(10 * time.Second); running.Load() < 2; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first reads never ran")
		}
	}
	// Another principal reads while the first one's slots are full.
	if code := get(tn.tokens["auditor"]); code != http.StatusOK {
		t.Fatalf("another principal's read: %d", code)
	}
	close(release)
	wg.Wait()
	if m := most.Load(); m > 3 { // the operator's 2, and the auditor's 1
		t.Fatalf("%d reads ran at once", m)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.slots) != 0 {
		t.Fatalf("%d principals' slots kept after their reads", len(q.slots))
	}
}
