package main

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"time"

	"github.com/ratepace/pace/internal/pacersim"
)

// palette holds distinguishable line colours, reused cyclically.
var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// writeSVG plots, for every client, the count the server reported on each
// of its responses against time, with the limit as a dashed line.
func writeSVG(w io.Writer, tr *pacersim.Trace, title string) error {
	const (
		width, height = 1000.0, 420.0
		left, right   = 60.0, 20.0
		top, bottom   = 40.0, 50.0
	)
	cfg := tr.Config
	maxY := 0
	for _, d := range tr.Decisions {
		maxY = max(maxY, d.Used, d.Limit)
	}
	maxY = (maxY/20 + 1) * 20
	x := func(t time.Duration) float64 {
		return left + (width-left-right)*t.Seconds()/cfg.Duration.Seconds()
	}
	y := func(v int) float64 {
		return top + (height-top-bottom)*(1-float64(v)/float64(maxY))
	}
	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(b, `<text x="%.0f" y="22" font-size="15">%s</text>`+"\n", left, html.EscapeString(title))
	// Axes, grid and labels.
	for v := 0; v <= maxY; v += 20 {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y(v), width-right, y(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%d</text>`+"\n", left-6, y(v)+4, v)
	}
	for m := 0; m <= int(cfg.Duration.Minutes()); m += 5 {
		t := time.Duration(m) * time.Minute
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x(t), top, x(t), height-bottom)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%d min</text>`+"\n", x(t), height-bottom+18, m)
	}
	fmt.Fprintf(b, `<text x="14" y="%.1f" transform="rotate(-90 14 %.1f)" text-anchor="middle">used (reported count in the window)</text>`+"\n", (top+height-bottom)/2, (top+height-bottom)/2)
	// The limit.
	fmt.Fprintf(b, `<polyline fill="none" stroke="black" stroke-dasharray="5,4" points="`)
	for t := time.Duration(0); t <= cfg.Duration; t += time.Second {
		fmt.Fprintf(b, "%.1f,%.1f ", x(t), y(cfg.Limit(min(t, cfg.Duration-time.Second))))
	}
	fmt.Fprintf(b, `"/>`+"\n")
	// One line per client.
	for c := 0; c < tr.Clients; c++ {
		fmt.Fprintf(b, `<polyline fill="none" stroke-width="1" stroke="%s" points="`, palette[c%len(palette)])
		for _, d := range tr.Decisions {
			if d.Client == c {
				fmt.Fprintf(b, "%.1f,%.1f ", x(d.At), y(d.Used))
			}
		}
		fmt.Fprintf(b, `"/>`+"\n")
		if c < 10 {
			lx := width - right - 110
			ly := top + 16*float64(c) + 8
			fmt.Fprintf(b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="%s" stroke-width="2"/><text x="%.0f" y="%.0f">client %d</text>`+"\n", lx, ly, lx+20, ly, palette[c%len(palette)], lx+26, ly+4, c)
		}
	}
	fmt.Fprintf(b, "</svg>\n")
	return b.Flush()
}
