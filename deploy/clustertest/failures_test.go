package clustertest

import (
	"fmt"
	"sync"
	"testing"
)

// failures is t, remembering each failure it reports so that they can be
// said again after the cluster's logs: a failed run prints those logs at
// its end, and a reader of the output's tail would see only them.
type failures struct {
	testing.TB
	mu   sync.Mutex
	said []string
}

// sayingFailuresLast wraps t; its cleanup, registered first, runs after
// every other one (the cluster's logs included) and repeats the failures.
func sayingFailuresLast(t *testing.T) *failures {
	f := &failures{TB: t}
	t.Cleanup(func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for i, s := range f.said {
			t.Logf("failure %d of %d (repeated after the logs): %s", i+1, len(f.said), s)
		}
	})
	return f
}

func (f *failures) note(s string) {
	f.mu.Lock()
	f.said = append(f.said, s)
	f.mu.Unlock()
}

func (f *failures) Error(args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintln(args...))
	f.TB.Error(args...)
}
func (f *failures) Errorf(format string, args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintf(format, args...))
	f.TB.Errorf(format, args...)
}
func (f *failures) Fatal(args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintln(args...))
	f.TB.Fatal(args...)
}
func (f *failures) Fatalf(format string, args ...any) {
	f.TB.Helper()
	f.note(fmt.Sprintf(format, args...))
	f.TB.Fatalf(format, args...)
}
