package msgbatch

import (
	"context"
	"testing"
	"time"
)

func TestCollect(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queued int
		max    int
		want   int
	}{
		{"takes what is ready", 3, 10, 3},
		{"stops at max", 10, 4, 4},
		{"one item", 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(chan int, tc.queued)
			for i := range tc.queued {
				ch <- i
			}
			got, ok := Collect(context.Background(), ch, tc.max, 10*time.Millisecond)
			if !ok || len(got) != tc.want {
				t.Fatalf("got %v (ok %v), want %d items", got, ok, tc.want)
			}
			for i, v := range got {
				if v != i {
					t.Fatalf("order: %v", got)
				}
			}
		})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got, ok := Collect(ctx, make(chan int), 4, time.Second); ok || got != nil {
		t.Fatalf("ended context: %v %v", got, ok)
	}
}

func TestCollectWeighed(t *testing.T) {
	ch := make(chan int, 10)
	for _, w := range []int{3, 3, 3, 1} {
		ch <- w
	}
	got, ok := CollectWeighed(context.Background(), ch, 5, 10*time.Millisecond, func(w int) int { return w })
	if !ok || len(got) != 2 {
		t.Fatalf("got %v (ok %v), want the two items that reach weight 5", got, ok)
	}
	got, _ = CollectWeighed(context.Background(), ch, 5, 10*time.Millisecond, func(w int) int { return w })
	if len(got) != 2 || got[0] != 3 || got[1] != 1 {
		t.Fatalf("rest %v", got)
	}
}
