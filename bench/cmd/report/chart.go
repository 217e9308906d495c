package main

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strings"

	"github.com/ratepace/pace/bench"
)

// Chart geometry, in pixels.
const (
	chartWidth  = 1000
	labelWidth  = 230 // the group names, left of the plot
	plotRight   = 70  // room for the value right of the longest bar
	barHeight   = 11
	barGap      = 3
	groupGap    = 14
	chartTop    = 70 // title, subtitle and the axis labels
	legendWidth = 190
)

// runsOf returns "one run" or "N runs".
func runsOf(n int) string {
	if n == 1 {
		return "one run"
	}
	return fmt.Sprintf("%d runs", n)
}

// palette colours the peers, in the order of bench.Local.
var palette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#76b7b2", "#edc948", "#9c755f"}

// chart draws the in-process ratios to pace as horizontal bars on a
// logarithmic axis: one group of bars per benchmark, one bar per peer, from
// pace's 1× to the peer's median ratio (right: the peer takes longer; left:
// it is faster).
func (d *document) chart() []byte {
	t := d.rs.table("BenchmarkLocal", "pace")
	var peers []bench.Impl
	for _, impl := range bench.Local() {
		if impl.Name != "pace" {
			peers = append(peers, impl)
		}
	}
	lo, hi := 1.0, 1.0
	for _, g := range t.groups {
		for _, impl := range peers {
			if c := t.cells[g][impl.Name]; c != nil && c.ratio > 0 {
				lo, hi = math.Min(lo, c.ratio), math.Max(hi, c.ratio)
			}
		}
	}
	// The axis runs between powers of two around every ratio.
	minExp, maxExp := math.Floor(math.Log2(lo)), math.Ceil(math.Log2(hi))
	if minExp == maxExp {
		maxExp++
	}
	plotLeft := float64(labelWidth)
	plotWidth := float64(chartWidth-legendWidth-plotRight) - plotLeft
	x := func(r float64) float64 {
		return plotLeft + (math.Log2(r)-minExp)/(maxExp-minExp)*plotWidth
	}
	groupHeight := len(peers)*(barHeight+barGap) + groupGap
	height := chartTop + len(t.groups)*groupHeight + 30

	var w bytes.Buffer
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		chartWidth, height, chartWidth, height)
	p(`<rect width="100%%" height="100%%" fill="#ffffff"/>` + "\n")
	p(`<text x="10" y="20" font-size="15" font-weight="bold">Time per decision, as a multiple of pace's (median of %s; log scale)</text>`+"\n", runsOf(d.rec.Count))
	p(`<text x="10" y="38" fill="#555">Right of 1×: the peer takes longer than pace; left: it is faster. %s</text>`+"\n", html.EscapeString(d.rec.Machine.CPU+", "+fmt.Sprint(d.rec.Machine.Cores)+" cores, "+d.rec.Machine.GoVersion))
	// Grid lines and their labels, at every power of two.
	plotBottom := height - 30
	for e := minExp; e <= maxExp; e++ {
		gx := x(math.Exp2(e))
		stroke, width := "#dddddd", 1
		if e == 0 {
			stroke, width = "#222222", 2
		}
		p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s" stroke-width="%d"/>`+"\n", gx, chartTop-8, gx, plotBottom, stroke, width)
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s×</text>`+"\n", gx, chartTop-12, ratio(math.Exp2(e)))
		p(`<text x="%.1f" y="%d" text-anchor="middle" fill="#333">%s×</text>`+"\n", gx, plotBottom+14, ratio(math.Exp2(e)))
	}
	p(`<text x="%.1f" y="%d" text-anchor="middle" font-weight="bold">pace</text>`+"\n", x(1), plotBottom+27)
	y := chartTop
	for _, g := range t.groups {
		label := strings.ReplaceAll(strings.TrimPrefix(g, "BenchmarkLocal/"), "/", " ")
		p(`<text x="%d" y="%d" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n",
			labelWidth-10, y+len(peers)*(barHeight+barGap)/2, html.EscapeString(label))
		for i, impl := range peers {
			by := y + i*(barHeight+barGap)
			c := t.cells[g][impl.Name]
			if c == nil || c.ratio == 0 {
				text := "not run" // a path the library cannot take (see the page)
				if c != nil && len(c.failures) > 0 {
					text = "fails (see the page)"
				}
				p(`<text x="%.1f" y="%d" dominant-baseline="middle" fill="#888">%s</text>`+"\n", x(1)+4, by+barHeight/2, text)
				continue
			}
			x0, x1 := x(1), x(c.ratio)
			if x1 < x0 {
				x0, x1 = x1, x0
			}
			p(`<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: %s× pace</title></rect>`+"\n",
				x0, by, math.Max(x1-x0, 1), barHeight, palette[i%len(palette)], html.EscapeString(impl.Title), ratio(c.ratio))
			anchor, tx := "start", x(c.ratio)+3
			if c.ratio < 1 {
				anchor, tx = "end", x(c.ratio)-3
			}
			p(`<text x="%.1f" y="%d" text-anchor="%s" dominant-baseline="middle" font-size="9" fill="#333">%s×</text>`+"\n",
				tx, by+barHeight/2, anchor, ratio(c.ratio))
		}
		y += groupHeight
	}
	// The legend.
	lx := chartWidth - legendWidth + 10
	for i, impl := range peers {
		ly := chartTop + i*18
		p(`<rect x="%d" y="%d" width="12" height="12" fill="%s"/>`+"\n", lx, ly, palette[i%len(palette)])
		p(`<text x="%d" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+18, ly+6, html.EscapeString(impl.Title))
	}
	p("</svg>\n")
	return w.Bytes()
}
