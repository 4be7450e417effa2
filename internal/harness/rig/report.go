package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Header opens every report: what ran, when, for how long, where.
type Header struct {
	Version   int       `json:"version"`
	StartedAt time.Time `json:"started_at"`
	DurationS float64   `json:"duration_s"`
	Quick     bool      `json:"quick"`
	Machine   Machine   `json:"machine"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs int    `json:"cpus"`
	OS   string `json:"os"`
	Go   string `json:"go"`
}

// NewHeader starts a report's header now.
func NewHeader(quick bool) Header {
	return Header{Version: 1, StartedAt: time.Now().UTC(), Quick: quick,
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()}}
}

// End records the run's duration.
func (h *Header) End() { h.DurationS = Round3(time.Since(h.StartedAt).Seconds()) }

// WriteJSON writes v, indented, to path.
func WriteJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Round3 rounds x to three decimals (milliseconds, for seconds).
func Round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// Clip cuts s to n bytes, saying how long it was.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// Interruptible is a context that the first Ctrl-C or SIGTERM ends, so the run stops what it
// started. A second one ends the process at once (every child has a parent-death signal).
func Interruptible() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// Sayer returns a command's printer: a line on w prefixed with name, then the status code back.
func Sayer(w io.Writer, name string) func(code int, format string, args ...any) int {
	return func(code int, format string, args ...any) int {
		fmt.Fprintf(w, name+": "+format+"\n", args...)
		return code
	}
}

// WriteReport prints the Markdown md to stdout and writes it to mdPath, and v as JSON to jsonPath
// (each when named).
func WriteReport(stdout io.Writer, md []byte, mdPath, jsonPath string, v any) error {
	var errs []error
	_, _ = stdout.Write(md)
	if mdPath != "" {
		if err := os.WriteFile(mdPath, md, 0o644); err != nil {
			errs = append(errs, fmt.Errorf("markdown: %w", err))
		}
	}
	if jsonPath != "" {
		if err := WriteJSON(jsonPath, v); err != nil {
			errs = append(errs, fmt.Errorf("json report: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Exit statuses of the harness commands.
const (
	ExitOK          = 0
	ExitFailed      = 1 // something failed (a wrong result, a lost job, a fault), or the run could not complete
	ExitUsage       = 2
	ExitInterrupted = 130 // Ctrl-C or SIGTERM; everything started is stopped
)

// Markdown writes a report's Markdown: lines, paragraphs, sections and tables.
type Markdown struct{ W io.Writer }

// P writes one line.
func (m Markdown) P(format string, args ...any) { fmt.Fprintf(m.W, format+"\n", args...) }

// Para writes a blank line, then one line.
func (m Markdown) Para(format string, args ...any) { m.P(""); m.P(format, args...) }

// Section writes "## title" between blank lines.
func (m Markdown) Section(title string) { m.P(""); m.P("## %s", title); m.P("") }

// Table writes a table's header row and its rule.
func (m Markdown) Table(cols ...string) {
	m.P("| %s |", strings.Join(cols, " | "))
	m.P("|%s", strings.Repeat("---|", len(cols)))
}

// Num formats a figure with as many decimals as its size deserves.
func Num(x float64) string {
	switch a := max(x, -x); {
	case a == 0:
		return "0"
	case a >= 1000:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	case a >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// Figure writes a figures table's row: name, n, p50, p90, max; dashes when d is empty.
func (m Markdown) Figure(name string, d Dist) {
	if d.N == 0 {
		m.P("| %s | 0 | – | – | – |", name)
		return
	}
	m.P("| %s | %d | %s | %s | %s |", name, d.N, Num(d.P50), Num(d.P90), Num(d.Max))
}

// List writes a section of bullets, nothing when there are none.
func (m Markdown) List(title string, items []string) {
	if len(items) == 0 {
		return
	}
	m.Section(title)
	for _, s := range items {
		m.P("- %s", s)
	}
}

// P50P90 is "p50 / p90" of d, a dash when it is empty.
func P50P90(d Dist) string {
	if d.N == 0 {
		return "–"
	}
	return Num(d.P50) + " / " + Num(d.P90)
}

// Cell makes s safe in a Markdown table cell.
func Cell(s string) string { return strings.ReplaceAll(Clip(s, 400), "|", "\\|") }
