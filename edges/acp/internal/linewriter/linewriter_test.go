package linewriter

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// plain hides a pipe's write deadlines: the goroutine path.
type plain struct{ io.Writer }

// TestStuckPeer: with a real pipe nobody reads, a line larger than the
// pipe's buffer fails with ErrStuck within the timeout, and so does every
// later write, at once; with a reader, lines arrive whole. Both for a
// writer with deadlines (an os.Pipe) and one without.
func TestStuckPeer(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		wrap func(*os.File) io.Writer
	}{
		{"write deadline", func(f *os.File) io.Writer { return f }},
		{"no deadline", func(f *os.File) io.Writer { return plain{f} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close(); w.Close() })
			lw := New(tc.wrap(w), timeout)
			if err := lw.WriteLine([]byte(`{"a":1}`)); err != nil {
				t.Fatalf("a small line into an empty pipe: %v", err)
			}
			big := bytes.Repeat([]byte("x"), 1<<20) // far over a pipe's buffer
			start := time.Now()
			err = lw.WriteLine(big)
			took := time.Since(start)
			if !errors.Is(err, ErrStuck) {
				t.Fatalf("write to a pipe nobody reads: %v, want ErrStuck", err)
			}
			if took > timeout+5*time.Second { // a bound, not a measurement: without the deadline it never returns
				t.Fatalf("the stuck write took %s (timeout %s)", took, timeout)
			}
			start = time.Now()
			if err := lw.WriteLine([]byte(`{}`)); !errors.Is(err, ErrStuck) || time.Since(start) > timeout/2 {
				t.Fatalf("write after a stuck one: %v after %s, want ErrStuck at once", err, time.Since(start))
			}
			t.Logf("stuck write failed after %s", took)
		})
	}
	t.Run("reader", func(t *testing.T) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close(); w.Close() })
		lw := New(w, timeout)
		got := make(chan int, 1)
		go func() {
			sc := bufio.NewScanner(r)
			sc.Buffer(nil, 2<<20)
			n := 0
			for sc.Scan() {
				n += len(sc.Bytes())
				if n == 2<<20 {
					break
				}
			}
			got <- n
		}()
		for range 2 {
			if err := lw.WriteLine(bytes.Repeat([]byte("y"), 1<<20)); err != nil {
				t.Fatal(err)
			}
		}
		if n := <-got; n != 2<<20 {
			t.Fatalf("read %d bytes", n)
		}
	})
}
