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
