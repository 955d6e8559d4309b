package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	p := Policy{Base: 10 * time.Millisecond, Cap: 80 * time.Millisecond}
	for _, tc := range []struct {
		attempt int
		ceil    time.Duration
	}{
		{0, 10 * time.Millisecond}, // below 1 counts as the first attempt
		{1, 10 * time.Millisecond},
		{2, 20 * time.Millisecond},
		{4, 80 * time.Millisecond},
		{5, 80 * time.Millisecond},  // capped
		{64, 80 * time.Millisecond}, // no overflow past the shift width
	} {
		for range 200 {
			if d := p.Delay(tc.attempt); d < tc.ceil/2 || d > tc.ceil {
				t.Fatalf("attempt %d: delay %s outside [%s, %s]", tc.attempt, d, tc.ceil/2, tc.ceil)
			}
		}
	}
	if d := (Policy{}).Delay(3); d != 0 {
		t.Fatalf("zero policy: %s", d)
	}
	// A large base never wraps into a short delay.
	big := Policy{Base: time.Hour, Cap: 48 * time.Hour}
	for _, n := range []int{20, 31, 40} {
		if d := big.Delay(n); d < 24*time.Hour {
			t.Fatalf("attempt %d of %+v: %s", n, big, d)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context: %v", err)
	}
	if err := (Policy{Base: time.Hour, Cap: time.Hour}).Wait(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a cancelled context: %v", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("a full pause: %v", err)
	}
}
