package diskspace

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

func TestGuard(t *testing.T) {
	dir := t.TempDir()
	free, total, err := Stat(dir)
	if err != nil || total == 0 || free > total {
		t.Fatalf("stat: free %d total %d: %v", free, total, err)
	}
	for _, tc := range []struct {
		name    string
		reserve uint64
		refused bool
	}{
		{"no reserve", 0, false},
		{"a reserve that fits", 1, false},
		{"more than the filesystem holds, capped at a quarter of it", total + 1, free < total/4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Guard{Store: "test store", Dir: dir, Reserve: tc.reserve}.Check()
			if (err != nil) != tc.refused {
				t.Fatalf("Check: %v, want refused %v", err, tc.refused)
			}
			if err != nil && (!errors.Is(err, syscall.ENOSPC) || !strings.HasPrefix(err.Error(), "test store: no space left on device (")) {
				t.Fatalf("Check's error: %v", err)
			}
		})
	}
	if err := (Guard{Store: "test store", Dir: dir + "/missing"}).Check(); err == nil || IsNoSpace(err) {
		t.Fatalf("Check of a missing directory: %v", err)
	}
}

func TestIsNoSpace(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("boom"), false},
		{fmt.Errorf("write: %w", syscall.ENOSPC), true},
		{&Error{Store: "s", Free: 1, Reserve: 2}, true},
		{fmt.Errorf("commit: %w", &Error{Store: "s"}), true},
		{errors.New("pebble: fatal commit error: write 000005.log: no space left on device"), true},
		{fmt.Errorf("write: %w", syscall.EIO), false},
	} {
		if got := IsNoSpace(tc.err); got != tc.want {
			t.Errorf("IsNoSpace(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
