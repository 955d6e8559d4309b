package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Latencies is a set of measured durations.
type Latencies []time.Duration

// Pct returns the p-th quantile (0 < p ≤ 1) by nearest rank (the smallest
// value with at least p of the set at or below it); it sorts l.
func (l Latencies) Pct(p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	slices.Sort(l)
	i := int(math.Ceil(p*float64(len(l)))) - 1
	return l[min(max(i, 0), len(l)-1)]
}

// fmtRate formats a rate per second with thousands grouped.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM/s", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk/s", v/1e3)
	default:
		return fmt.Sprintf("%.0f/s", v)
	}
}

// fmtDur formats a latency with a precision that suits its size.
func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%.1f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	case d >= 10*time.Microsecond:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	case d >= time.Microsecond:
		return fmt.Sprintf("%.1f µs", float64(d)/1e3)
	default:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	}
}

// fmtRatio formats a/b as "2.4×", or "n/a" when b is zero.
func fmtRatio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", a/b)
}
