package main

import (
	"io"
	"time"

	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Report is the JSON report (--json): report.Load and the sections of the scenarios whose types
// live here.
type Report struct {
	report.Load
	FailClasses []FailClass `json:"failure_classes,omitempty"`
	Keyed       *Keyed      `json:"keyed,omitempty"`
	CSVSum      *CSVSum     `json:"csv_sum,omitempty"`
	Programs    *Programs   `json:"programs,omitempty"` // issue 34's program jobs (programs.go)
	LongRead    *LongRead   `json:"long_read,omitempty"`
	SmallCLI    *SmallCLI   `json:"small_job_cli,omitempty"`
	Status      *Status     `json:"status,omitempty"` // issue 35's status figures (status.go)
	Scale       *Scale      `json:"scale,omitempty"`
	Thousand    *Thousand   `json:"thousand,omitempty"`
	Schedules   *Schedules  `json:"schedules,omitempty"`
}

// The report types the scenario files here name.
type (
	Target   = report.Target
	SmallJob = report.SmallJob
)

// Kill is what failclass.go hands fcluster.awaitFirstMerge: when the fault struck and the epoch
// elected after it.
type Kill struct {
	at       time.Time
	NewEpoch uint64
}

// targets judges every target, the failure classes' and the keyed scenario's included.
func targets(cfg *Config, rep *Report) []Target {
	return rep.Judge(cfg.Quick, func(ts *report.Targets) {
		classTargets(cfg, rep, ts.Add)
		*ts = append(*ts, smallTargets(cfg, rep.SmallCLI)...)
		*ts = append(*ts, keyedTargets(cfg, rep)...)
		*ts = append(*ts, csvTargets(cfg, rep.CSVSum)...)
		*ts = append(*ts, programTargets(cfg, rep.Programs)...)
		*ts = append(*ts, longReadTargets(rep.LongRead)...)
		*ts = append(*ts, scaleTargets(cfg, rep)...)
		*ts = append(*ts, thousandTargets(cfg, rep)...)
		*ts = append(*ts, scheduleTargets(cfg, rep.Schedules)...)
	})
}

// writeMarkdown writes the human summary of rep.
func writeMarkdown(w io.Writer, rep *Report) {
	rep.WriteMarkdown(w, report.Sections{
		AfterTotals: func(w io.Writer) { report.WriteFailClasses(w, rep.FailClasses) },
		Figures: func(row func(string, rig.Dist)) {
			writeSmallFigures(row, rep.SmallCLI)
			writeKeyedFigures(row, rep)
			writeCSVFigures(row, rep.CSVSum)
			writeProgramFigures(row, rep.Programs)
		},
		Notes:      append(append(keyedNotes(rep), csvNotes(rep.CSVSum)...), programNotes(rep.Programs)...),
		AfterNotes: func(w io.Writer) { writeScale(w, rep.Scale); writeThousand(w, rep.Thousand) },
	})
}
