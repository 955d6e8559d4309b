package main

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// Plot geometry, in SVG user units.
const (
	plotWidth   = 960
	panelHeight = 150
	panelGap    = 62
	marginLeft  = 86
	marginRight = 24
	plotTop     = 56
)

// line is one series of a panel.
type line struct {
	label string
	color string
	y     []float64
}

// panel is one chart: a quantity over the run's minutes.
type panel struct {
	title, unit string
	lines       []line
}

// panelsOf are the charts of a run: one per series, over the elapsed
// minutes x.
func panelsOf(samples []sample) (x []float64, panels []panel) {
	x = make([]float64, len(samples))
	f := func(get func(s sample) float64) []float64 {
		y := make([]float64, len(samples))
		for i, s := range samples {
			y[i] = get(s)
		}
		return y
	}
	for i, s := range samples {
		x[i] = s.at.Minutes()
	}
	windowLen := func(i int) float64 {
		if i == 0 {
			return 0
		}
		return (samples[i].at - samples[i-1].at).Seconds()
	}
	rate := func(count func(s sample) int) []float64 {
		y := make([]float64, len(samples))
		for i, s := range samples {
			y[i] = math.NaN() // the sample before the load ends no window
			if w := windowLen(i); w > 0 {
				y[i] = float64(count(s)) / w
			}
		}
		return y
	}
	// Latency of windows without calls (the first sample) is not zero but
	// absent.
	lat := func(get func(s sample) float64) []float64 {
		y := f(get)
		for i, s := range samples {
			if s.ok == 0 {
				y[i] = math.NaN()
			}
		}
		return y
	}
	panels = []panel{
		{"Resident memory of chio up (VmRSS)", "MiB", []line{{"RSS", "#1f77b4", f(func(s sample) float64 { return float64(s.rss) / (1 << 20) })}}},
		{"Goroutines (go_goroutines on /metrics)", "goroutines", []line{{"goroutines", "#2ca02c", f(func(s sample) float64 { return s.goroutines })}}},
		{"Open file descriptors (/proc/PID/fd)", "files", []line{{"open files", "#9467bd", f(func(s sample) float64 { return float64(s.fds) })}}},
		{"Bytes under the data directory", "MiB", []line{{"disk", "#8c564b", f(func(s sample) float64 { return float64(s.disk) / (1 << 20) })}}},
		{"Receipts in the log (checkpoint size)", "receipts", []line{{"log size", "#17becf", f(func(s sample) float64 { return float64(s.logSize) })}}},
		{"Call latency per window", "ms", []line{
			{"p50", "#1f77b4", lat(func(s sample) float64 { return float64(s.p50.Microseconds()) / 1000 })},
			{"p99", "#d62728", lat(func(s sample) float64 { return float64(s.p99.Microseconds()) / 1000 })},
		}},
		{"Calls per second (successful) and errors per second, per window", "per second", []line{
			{"calls ok", "#2ca02c", rate(func(s sample) int { return s.ok })},
			{"errors", "#d62728", rate(func(s sample) int {
				n := 0
				for _, v := range s.errors {
					n += v
				}
				return n
			})},
		}},
	}
	return x, panels
}

// plot renders the samples as an SVG: one panel per series, the x axis the
// run's elapsed minutes, each y axis labelled with its unit.
func plot(title string, samples []sample) string {
	x, panels := panelsOf(samples)
	height := plotTop + len(panels)*(panelHeight+panelGap)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", plotWidth, height, plotWidth, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" font-weight="bold">%s</text>`+"\n", marginLeft, html.EscapeString(title))
	xmax := 0.0
	if len(x) > 0 {
		xmax = x[len(x)-1]
	}
	for i, p := range panels {
		top := float64(plotTop + i*(panelHeight+panelGap) + 20)
		drawPanel(&b, p, x, xmax, top)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func drawPanel(b *strings.Builder, p panel, x []float64, xmax, top float64) {
	left, right := float64(marginLeft), float64(plotWidth-marginRight)
	bottom := top + panelHeight
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, l := range p.lines {
		for _, v := range l.y {
			if !math.IsNaN(v) {
				ymin, ymax = math.Min(ymin, v), math.Max(ymax, v)
			}
		}
	}
	if math.IsInf(ymin, 1) {
		ymin, ymax = 0, 1
	}
	// Axes start at zero, so that growth reads as a share of the level.
	ymin = math.Min(0, ymin)
	yticks, ytop := niceTicks(ymin, ymax)
	xticks, xright := xAxis(xmax)
	sx := func(v float64) float64 { return left + (v/xright)*(right-left) }
	sy := func(v float64) float64 { return bottom - (v-ymin)/(ytop-ymin)*(bottom-top) }

	fmt.Fprintf(b, `<text x="%.0f" y="%.0f" font-size="14" font-weight="bold">%s</text>`+"\n", left, top-8, html.EscapeString(p.title))
	for _, t := range yticks {
		y := sy(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, y, right, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", left-6, y, tickLabel(t))
	}
	for _, t := range xticks {
		xx := sx(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#f0f0f0"/>`+"\n", xx, top, xx, bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", xx, bottom+15, tickLabel(t))
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", left, top, right-left, bottom-top)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">elapsed (minutes)</text>`+"\n", (left+right)/2, bottom+30)
	fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", left-60, (top+bottom)/2, html.EscapeString(p.unit))
	for li, l := range p.lines {
		var path strings.Builder
		pen := false
		for i, v := range l.y {
			if math.IsNaN(v) {
				pen = false
				continue
			}
			cmd := "L"
			if !pen {
				cmd = "M"
			}
			fmt.Fprintf(&path, "%s%.1f %.1f ", cmd, sx(x[i]), sy(v))
			pen = true
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6"/>`+"\n", strings.TrimSpace(path.String()), l.color)
		if len(p.lines) > 1 {
			lx := right - 180 + float64(li)*90
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", lx, top-12, lx+18, top-12, l.color)
			fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+22, top-8, html.EscapeString(l.label))
		}
	}
}

// xAxis ends at the run's last sample, with round ticks up to it, so a
// run a little past a round number does not leave an empty stretch.
func xAxis(xmax float64) (ticks []float64, right float64) {
	right = math.Max(xmax, 1e-9)
	all, _ := niceTicks(0, right)
	for _, t := range all {
		if t <= right*(1+1e-6) {
			ticks = append(ticks, t)
		}
	}
	return ticks, right
}

// niceTicks are round tick values from lo to at least hi, and the last one.
func niceTicks(lo, hi float64) ([]float64, float64) {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	var ticks []float64
	v := start
	for i := 0; i < 20; i++ {
		ticks = append(ticks, v)
		if v >= hi-step*1e-9 {
			break
		}
		v = start + float64(i+1)*step
	}
	return ticks, ticks[len(ticks)-1]
}

func tickLabel(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}
