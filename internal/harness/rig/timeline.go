package rig

import (
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// Timeline is what the plot draws of one run.
type Timeline struct {
	Title     string
	Start     time.Time
	Total     int         // shards
	Samples   []Sample    // checkpoint readings
	Completed []time.Time // first result of each shard, in order
	Kills     []Mark      // red, dashed
	Elections []Mark      // green
	Finished  float64     // seconds since Start the job ended (0: not ended)
}

// Mark is a labelled instant of a timeline, in seconds since its start.
type Mark struct {
	AtS   float64
	Label string
}

// FirstCompletions lists the time of each shard's first result, in order.
func FirstCompletions(results []ResultObs) []time.Time {
	seen := map[int]bool{}
	var out []time.Time
	for _, o := range results {
		if !seen[o.Index] {
			seen[o.Index] = true
			out = append(out, o.T)
		}
	}
	return out
}

// Panel geometry of the plot, in SVG user units.
const (
	panelW, panelH             = 600, 270
	padL, padR, padT, padB     = 58, 18, 34, 40
	plotCols                   = 2
	legendH                    = 30
	colDone, colResults        = "#1f5fbf", "#9bb7e0"
	colKill, colElect, colGrid = "#d62728", "#2ca02c", "#e4e4e4"
	fontAttrs                  = `font-family="sans-serif" font-size="11"`
)

// WriteSVGFile writes WriteSVG's drawing to the file at path.
func WriteSVGFile(path string, tls []*Timeline) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = WriteSVG(f, tls)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// WriteSVG draws one panel per timeline: shards merged (last checkpoint, solid) and shards
// completed by workers (first result seen, light) over seconds since submit, with a red line at
// every kill and a green one at every election.
func WriteSVG(w io.Writer, tls []*Timeline) error {
	if len(tls) == 0 {
		tls = []*Timeline{{Title: "no run to plot"}}
	}
	rows := (len(tls) + plotCols - 1) / plotCols
	cols := min(plotCols, len(tls))
	W, H := cols*panelW, rows*panelH+legendH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", W, H, W, H, fontAttrs)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", W, H)
	// Legend.
	lx := 12
	for _, l := range []struct{ col, dash, text string }{
		{colDone, "", "shards merged (checkpoint)"}, {colResults, "", "shards completed (first result)"},
		{colKill, "5,3", "kill (SIGKILL / SIGTERM)"}, {colElect, "", "new leader elected"},
	} {
		fmt.Fprintf(&b, `<line x1="%d" y1="16" x2="%d" y2="16" stroke="%s" stroke-width="2.5" stroke-dasharray="%s"/>`, lx, lx+24, l.col, l.dash)
		fmt.Fprintf(&b, `<text x="%d" y="20">%s</text>`+"\n", lx+30, html.EscapeString(l.text))
		lx += 40 + 7*len(l.text)
	}
	for i, tl := range tls {
		ox, oy := (i%plotCols)*panelW, legendH+(i/plotCols)*panelH
		drawPanel(&b, tl, float64(ox), float64(oy))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func drawPanel(b *strings.Builder, tl *Timeline, ox, oy float64) {
	x0, y0 := ox+padL, oy+padT
	pw, ph := float64(panelW-padL-padR), float64(panelH-padT-padB)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" font-size="13" font-weight="bold">%s</text>`+"\n", x0, oy+20, html.EscapeString(tl.Title))
	tmax := 1.0
	for _, s := range tl.Samples {
		tmax = max(tmax, s.T.Sub(tl.Start).Seconds())
	}
	for _, k := range tl.Kills {
		tmax = max(tmax, k.AtS)
	}
	for _, e := range tl.Elections {
		tmax = max(tmax, e.AtS)
	}
	tmax = max(tmax, tl.Finished)
	xstep := niceStep(tmax, 8)
	tmax = math.Ceil(tmax/xstep) * xstep
	total := float64(max(tl.Total, 1))
	X := func(t float64) float64 { return x0 + pw*t/tmax }
	Y := func(n float64) float64 { return y0 + ph*(1-n/total) }

	// Grid and axes.
	for t := 0.0; t <= tmax+1e-9; t += xstep {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, X(t), y0, X(t), y0+ph, colGrid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", X(t), y0+ph+15, trimFloat(t))
	}
	for q := 0; q <= 4; q++ {
		n := total * float64(q) / 4
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`, x0, Y(n), x0+pw, Y(n), colGrid)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%.0f</text>`+"\n", x0-6, Y(n)+4, n)
	}
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#888"/>`+"\n", x0, y0, pw, ph)
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">seconds since submit</text>`+"\n", x0+pw/2, y0+ph+31)
	fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">shards</text>`+"\n", ox+14, y0+ph/2)

	// Completed shards: a point per first result, drawn as a polyline.
	if len(tl.Completed) > 0 {
		pts := []string{fmt.Sprintf("%.1f,%.1f", X(0), Y(0))}
		for i, t := range tl.Completed {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", X(t.Sub(tl.Start).Seconds()), Y(float64(i+1))))
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), colResults)
	}
	// Merged shards: a step line through the checkpoint readings.
	if len(tl.Samples) > 0 {
		pts := []string{fmt.Sprintf("%.1f,%.1f", X(0), Y(0))}
		prev := 0.0
		for _, s := range tl.Samples {
			t := s.T.Sub(tl.Start).Seconds()
			pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", X(t), Y(prev), X(t), Y(float64(s.Done))))
			prev = float64(s.Done)
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.5"/>`+"\n", strings.Join(pts, " "), colDone)
	}
	if tl.Finished > 0 {
		x := X(tl.Finished)
		fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`, x, Y(total), colDone)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">finished %.2f s</text>`+"\n", x-6, Y(total)+16, tl.Finished)
	}
	// Kills and elections, labelled at the top of the panel, alternating rows so they don't overlap.
	for i, k := range tl.Kills {
		x := X(k.AtS)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2" stroke-dasharray="5,3"/>`, x, y0, x, y0+ph, colKill)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s">%s</text>`+"\n", x+3, y0+12+float64(i%2)*12, colKill, html.EscapeString(k.Label))
	}
	for i, e := range tl.Elections {
		x := X(e.AtS)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`, x, y0, x, y0+ph, colElect)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" fill="%s" text-anchor="end">%s</text>`+"\n", x-3, y0+ph-8-float64(i%2)*12, colElect, html.EscapeString(e.Label))
	}
}

// niceStep returns a step of 1, 2 or 5 × 10^k that cuts span into at most n parts.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func trimFloat(x float64) string {
	s := fmt.Sprintf("%.2f", x)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}

// Elect is an election seen during a run.
type Elect struct {
	AtS    float64 `json:"at_s"`
	Worker string  `json:"worker"`
	Epoch  uint64  `json:"epoch"`
}

// Elects lists c's elections between start and end, timed from start.
func Elects(c *cluster.Cluster, start, end time.Time) []Elect {
	var out []Elect
	for _, e := range Elections(c, start, end) {
		out = append(out, Elect{AtS: Round3(e.Time.Sub(start).Seconds()), Worker: e.Worker, Epoch: e.Epoch})
	}
	return out
}

// ElectionMarks marks elects on a timeline: "worker eN".
func ElectionMarks(elects []Elect) []Mark {
	var out []Mark
	for _, e := range elects {
		out = append(out, Mark{AtS: e.AtS, Label: fmt.Sprintf("%s e%d", e.Worker, e.Epoch)})
	}
	return out
}
