package progress

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clock is a test clock that moves only when told.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// step is one update of a test job: advance the clock, then set done.
type step struct {
	after time.Duration
	done  uint64
}

func TestOutput(t *testing.T) {
	cases := []struct {
		name     string
		terminal bool
		total    uint64
		steps    []step
		stop     bool
		want     string
	}{{
		name:  "plain lines at each tenth",
		total: 100,
		steps: []step{{time.Second, 5}, {time.Second, 10}, {time.Second, 15}, {time.Second, 35}, {time.Second, 100}},
		want: "job: 10/100 rows (10%), 5.0/s, ETA 18s\n" +
			"job: 35/100 rows (35%), 8.8/s, ETA 7.4s\n" +
			"job: 100/100 rows (100%), 20/s\n" +
			"job: done, 100 rows in 5s (20/s)\n",
	}, {
		name:  "plain line after the interval when slow",
		total: 1000,
		steps: []step{{time.Second, 1}, {4 * time.Second, 2}, {time.Second, 3}, {5 * time.Second, 3}}, // the last: 6 s after a line, one more row,
		want: "job: 2/1000 rows (0%), 0.4/s, ETA 41m35s\n" +
			"job: 3/1000 rows (0%), 0.3/s, ETA 1h0m56s\n" +
			"job: done, 3 rows in 11s (0.3/s)\n",
	}, {
		name:  "unknown total",
		steps: []step{{5 * time.Second, 7}},
		want: "job: 7 rows, 1.4/s\n" +
			"job: done, 7 rows in 5s (1.4/s)\n",
	}, {
		name:  "stopped part way",
		total: 10,
		steps: []step{{time.Second, 4}},
		stop:  true,
		want: "job: 4/10 rows (40%), 4.0/s, ETA 1.5s\n" +
			"job: stopped, 4/10 rows in 1s (4.0/s)\n",
	}, {
		name: "stopped before it started: nothing",
		stop: true,
	}, {
		name:     "terminal redraws at most ten times a second",
		terminal: true,
		total:    10,
		steps:    []step{{50 * time.Millisecond, 1}, {50 * time.Millisecond, 2}, {10 * time.Millisecond, 3}, {time.Second, 10}},
		want: "\rjob: 2/10 rows (20%), 20/s, ETA 400ms" +
			"\rjob: 10/10 rows (100%), 9.0/s        " +
			"\r                             \r" +
			"job: done, 10 rows in 1.1s (9.0/s)\n",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			clk := &clock{t: time.Unix(1760000000, 0)}
			r := New(&out, "job", c.total, WithUnit("rows"), WithClock(clk.now), WithTerminal(c.terminal))
			for _, s := range c.steps {
				clk.advance(s.after)
				r.Set(s.done)
			}
			if c.stop {
				r.Stop()
			} else {
				r.Done()
			}
			r.Stop() // after the end: nothing
			if got := out.String(); got != c.want {
				t.Fatalf("got\n%q\nwant\n%q", got, c.want)
			}
			if !c.terminal && strings.ContainsAny(out.String(), "\r\x1b") {
				t.Fatalf("control characters in plain output %q", out.String())
			}
		})
	}
}

func TestUpdateAndAdd(t *testing.T) {
	var out bytes.Buffer
	clk := &clock{t: time.Unix(0, 0)}
	r := New(&out, "job", 0, WithClock(clk.now), WithTerminal(false))
	clk.advance(time.Second)
	r.Func()(5, 10) // the total arrives with the first update
	r.Add(5)
	r.Done()
	want := "job: 5/10 items (50%), 5.0/s, ETA 1s\njob: 10/10 items (100%), 10/s\njob: done, 10 items in 1s (10/s)\n"
	if out.String() != want {
		t.Fatalf("got %q, want %q", out.String(), want)
	}
	var nilReporter *Reporter
	nilReporter.Add(1)
	nilReporter.Done()
}

func TestIsTerminal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) || IsTerminal(&bytes.Buffer{}) {
		t.Fatal("a file or a buffer taken for a terminal")
	}
}
