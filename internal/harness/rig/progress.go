package rig

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Progress is the display of a long run: one progress bar per phase on a terminal,
// plain timestamped lines otherwise (CI logs, go test). Safe for concurrent use.
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	tty   bool
	start time.Time
	bar   *progressbar.ProgressBar
	name  string
	desc  string
	total int
	n     int
	last  time.Time // last plain progress line
}

// NewProgress writes to w, with a bar only when w is a terminal.
func NewProgress(w io.Writer) *Progress {
	p := &Progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		p.tty = true
	}
	return p
}

// Phase starts a new phase of total units, ending the previous one.
func (p *Progress) Phase(name string, total int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked()
	p.name, p.desc, p.total, p.n = name, "", total, 0
	if p.tty {
		p.bar = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(fmt.Sprintf("%-22s", name)), progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true), progressbar.OptionShowElapsedTimeOnFinish(),
			progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionClearOnFinish(),
			progressbar.OptionSetWidth(30))
		return
	}
	fmt.Fprintf(p.w, "[%6.1fs] %s: starting (%d)\n", time.Since(p.start).Seconds(), name, total)
	p.last = time.Now()
}

// Set moves the current phase to n units.
func (p *Progress) Set(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n = n
	if p.bar != nil {
		_ = p.bar.Set(n)
		return
	}
	if !p.tty && p.name != "" && time.Since(p.last) >= 2*time.Second {
		p.last = time.Now()
		fmt.Fprintf(p.w, "[%6.1fs] %s: %d/%d%s\n", time.Since(p.start).Seconds(), p.name, n, p.total, p.desc)
	}
}

// Describe says what happens now, beside the current phase's count.
func (p *Progress) Describe(desc string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desc = ", " + desc
	if p.bar != nil {
		p.bar.Describe(fmt.Sprintf("%-22s", p.name+p.desc))
	}
}

// Add moves the current phase on by d units.
func (p *Progress) Add(d int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	n := p.n + d
	p.mu.Unlock()
	p.Set(n)
}

// Logf prints a line above the bar (or as a plain line).
func (p *Progress) Logf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.bar != nil {
		_ = p.bar.Clear()
	}
	fmt.Fprintf(p.w, "[%6.1fs] "+format+"\n", append([]any{time.Since(p.start).Seconds()}, args...)...)
	if p.bar != nil {
		_ = p.bar.RenderBlank()
		_ = p.bar.Set(p.n)
	}
}

// Done ends the current phase.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.finishLocked()
}

func (p *Progress) finishLocked() {
	if p.bar != nil {
		_ = p.bar.Finish()
		p.bar = nil
	}
	p.name = ""
}
