// Package progress reports the progress of a long command on a writer,
// normally stderr: on a terminal one line redrawn in place (done/total,
// rate, ETA), elsewhere plain lines a log can keep, and a summary line at
// the end either way.
package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// redrawInterval bounds terminal redraws to ten a second: faster is
// flicker, and every redraw is a write to the terminal.
const redrawInterval = 100 * time.Millisecond

// DefaultInterval is the longest gap between two plain lines while work
// is done; a line is also printed at each further tenth of the total.
const DefaultInterval = 5 * time.Second

// Reporter reports one job's progress. Its methods are safe for
// concurrent use; a nil *Reporter does nothing.
type Reporter struct {
	mu       sync.Mutex
	w        io.Writer
	label    string
	unit     string
	now      func() time.Time
	interval time.Duration
	terminal bool

	start    time.Time
	done     uint64
	total    uint64
	last     time.Time // of the last line or redraw
	lastDone uint64    // done at the last plain line
	decile   uint64    // tenths of the total reached at the last plain line
	width    int       // of the line on the terminal, to blank it
	updated  bool      // by Add, Set or Update: the job started
	finished bool
}

// Option configures a Reporter.
type Option func(*Reporter)

// WithClock sets the clock (default time.Now): tests advance their own.
func WithClock(now func() time.Time) Option { return func(r *Reporter) { r.now = now } }

// WithInterval sets the longest gap between plain lines (default
// DefaultInterval).
func WithInterval(d time.Duration) Option { return func(r *Reporter) { r.interval = d } }

// WithTerminal overrides the detection of a terminal.
func WithTerminal(on bool) Option { return func(r *Reporter) { r.terminal = on } }

// WithUnit names what is counted (default "items").
func WithUnit(unit string) Option { return func(r *Reporter) { r.unit = unit } }

// New starts reporting a job of total units (0: not known yet) on w.
func New(w io.Writer, label string, total uint64, opts ...Option) *Reporter {
	r := &Reporter{w: w, label: label, unit: "items", now: time.Now, interval: DefaultInterval, total: total, terminal: IsTerminal(w)}
	for _, o := range opts {
		o(r)
	}
	r.start = r.now()
	r.last = r.start
	return r
}

// IsTerminal reports whether w is a character device, as a terminal is.
// The check is the file mode alone, so a dependency is not needed for it.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Func adapts the Reporter to the callbacks the library functions take.
func (r *Reporter) Func() func(done, total uint64) {
	return func(done, total uint64) { r.Update(done, total) }
}

// Add counts n more units done.
func (r *Reporter) Add(n uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done += n
	r.report()
}

// Set sets the units done.
func (r *Reporter) Set(done uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done = done
	r.report()
}

// Update sets the units done and the total.
func (r *Reporter) Update(done, total uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.done, r.total = done, total
	r.report()
}

// report prints a line if one is due. r.mu is held.
func (r *Reporter) report() {
	r.updated = true
	if r.finished {
		return
	}
	now := r.now()
	if r.terminal {
		if now.Sub(r.last) < redrawInterval {
			return
		}
		r.last = now
		r.redraw(r.line(now))
		return
	}
	decile := r.decile
	if r.total > 0 {
		decile = min(r.done, r.total) * 10 / r.total
	}
	if decile > r.decile || (now.Sub(r.last) >= r.interval && r.done != r.lastDone) {
		r.decile, r.last, r.lastDone = decile, now, r.done
		fmt.Fprintln(r.w, r.line(now))
	}
}

// redraw overwrites the terminal line with s, blanking what is left of a
// longer one. r.mu is held.
func (r *Reporter) redraw(s string) {
	pad := max(r.width-len(s), 0)
	fmt.Fprintf(r.w, "\r%s%s", s, strings.Repeat(" ", pad))
	r.width = len(s)
}

// clear blanks the terminal line. r.mu is held.
func (r *Reporter) clear() {
	if r.terminal && r.width > 0 {
		fmt.Fprintf(r.w, "\r%s\r", strings.Repeat(" ", r.width))
		r.width = 0
	}
}

// line is the progress line at now. r.mu is held.
func (r *Reporter) line(now time.Time) string {
	elapsed := now.Sub(r.start)
	rate := perSecond(r.done, elapsed)
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d", r.label, r.done)
	if r.total > 0 {
		fmt.Fprintf(&b, "/%d %s (%d%%)", r.total, r.unit, min(r.done, r.total)*100/r.total)
	} else {
		fmt.Fprintf(&b, " %s", r.unit)
	}
	fmt.Fprintf(&b, ", %s/s", formatRate(rate))
	if r.total > 0 && r.done < r.total {
		if rate > 0 {
			eta := time.Duration(float64(r.total-r.done) / rate * float64(time.Second))
			fmt.Fprintf(&b, ", ETA %s", formatDuration(eta))
		} else {
			b.WriteString(", ETA unknown")
		}
	}
	return b.String()
}

// Done ends the report with its summary line. Later calls, and Stop, do
// nothing.
func (r *Reporter) Done() { r.finish("done") }

// Stop ends a report that did not finish, with a summary line saying how
// far it went; after Done, or before any update (a command refused before
// its job started), it prints nothing. Deferred, it covers every early
// return.
func (r *Reporter) Stop() { r.finish("stopped") }

func (r *Reporter) finish(how string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished {
		return
	}
	r.finished = true
	if how == "stopped" && !r.updated {
		return
	}
	r.clear()
	elapsed := r.now().Sub(r.start)
	count := fmt.Sprintf("%d", r.done)
	if how != "done" && r.total > 0 {
		count = fmt.Sprintf("%d/%d", r.done, r.total)
	}
	fmt.Fprintf(r.w, "%s: %s, %s %s in %s (%s/s)\n", r.label, how, count, r.unit, formatDuration(elapsed), formatRate(perSecond(r.done, elapsed)))
}

func perSecond(n uint64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

func formatRate(rate float64) string {
	if rate < 10 {
		return fmt.Sprintf("%.1f", rate)
	}
	return fmt.Sprintf("%.0f", rate)
}

// formatDuration rounds to the millisecond under a second, to a tenth of
// a second under a minute and to the second above: precision nobody
// reads is noise.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}
