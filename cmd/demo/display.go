package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// display writes the demo's output: a live progress bar on a terminal, a line a second otherwise
// (a CI log, a pipe). Notes printed while the bar runs appear above it.
type display struct {
	w        io.Writer
	tty      bool
	bar      *progressbar.ProgressBar
	lastLine time.Time
	lastText string
	stepOpen bool
}

func newDisplay(w io.Writer) *display {
	d := &display{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		d.tty = true
	}
	return d
}

// line prints a line.
func (d *display) line(format string, a ...any) {
	d.closeStep()
	fmt.Fprintf(d.w, format+"\n", a...)
}

// step starts a "▸ doing something … 1.2s" line; done ends it.
func (d *display) step(format string, a ...any) {
	d.closeStep()
	fmt.Fprintf(d.w, "▸ "+format+" … ", a...)
	d.stepOpen = true
}

func (d *display) done(took time.Duration) {
	if d.stepOpen {
		fmt.Fprintf(d.w, "%.1fs\n", took.Seconds())
		d.stepOpen = false
	}
}

func (d *display) closeStep() {
	if d.stepOpen {
		fmt.Fprintln(d.w)
		d.stepOpen = false
	}
}

// progress shows done of total shards merged.
func (d *display) progress(done, total int, desc string) {
	if total == 0 {
		return
	}
	if !d.tty {
		// A line a second while it moves, every 5 s while it does not.
		text := fmt.Sprintf("  %3d/%d shards merged, %s", done, total, desc)
		since := time.Since(d.lastLine)
		if text != d.lastText && (since >= time.Second || done == total) || since >= 5*time.Second {
			d.lastLine, d.lastText = time.Now(), text
			fmt.Fprintln(d.w, text)
		}
		return
	}
	if d.bar == nil {
		d.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(d.w),
			progressbar.OptionShowCount(), progressbar.OptionSetWidth(30), progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(50*time.Millisecond), progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionSetTheme(progressbar.ThemeASCII))
	}
	d.bar.Describe(fmt.Sprintf("%-22s", desc))
	_ = d.bar.Set(done)
}

// note prints a line above the progress bar (or just a line).
func (d *display) note(format string, a ...any) {
	if d.bar != nil {
		_ = d.bar.Clear()
	}
	d.line(format, a...)
	if d.bar != nil {
		_ = d.bar.RenderBlank()
	}
}

// finish ends the progress bar, leaving its last state on screen.
func (d *display) finish() {
	if d.bar != nil {
		_ = d.bar.Exit()
		fmt.Fprintln(d.w)
		d.bar = nil
	}
}
