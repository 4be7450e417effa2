package main

import (
	"strings"
	"testing"
)

func TestProgramTargets_JudgesPythonReportsAwk(t *testing.T) {
	rounds := []ProgramRound{
		{Python: ProgramRun{Exact: true, ClusterS: 10, SingleS: 20, CPU: CPUFigures{Total: 18}, SingleCPUS: 15},
			Awk: ProgramRun{Exact: true, ClusterS: 30, SingleS: 10, CPU: CPUFigures{Total: 40}, SingleCPUS: 10}},
		{Python: ProgramRun{Exact: true, ClusterS: 12, SingleS: 10, CPU: CPUFigures{Total: 20}, SingleCPUS: 10},
			Awk: ProgramRun{Exact: false, ClusterS: 1, SingleS: 10}}, // a wrong answer is no figure
		{Python: ProgramRun{Exact: true, ClusterS: 9, SingleS: 10, CPU: CPUFigures{Total: 16}, SingleCPUS: 16},
			Awk: ProgramRun{Exact: true, ClusterS: 20, SingleS: 10, CPU: CPUFigures{Total: 30}, SingleCPUS: 10}},
	}
	p := &Programs{Bytes: 182_452_224, Distinct: 50_000, Rounds: rounds,
		PythonJob: summarizePrograms(rounds, pythonOf),
		AwkJob:    summarizePrograms(rounds, awkOf)}
	// Python: ratios 0.5, 1.2, 0.9 → 0.9; CPU 1.2, 2, 1 → 1.2. awk: 3 and 2 (the wrong round left out) → 2.5.
	if p.PythonJob.Ratio != 0.9 || p.PythonJob.CPURatio != 1.2 || p.PythonJob.ClusterS != 10 || p.AwkJob.Ratio != 2.5 || p.AwkJob.CPURatio != 3.5 {
		t.Fatalf("medians: python %+v, awk %+v", p.PythonJob, p.AwkJob)
	}
	for _, quick := range []bool{false, true} {
		ts := programTargets(&Config{Quick: quick}, p)
		if len(ts) != 2 {
			t.Fatalf("quick %v: %d targets, want 2", quick, len(ts))
		}
		py, awk := ts[0], ts[1]
		if !strings.HasPrefix(py.Name, "Python word count") || py.Value != 0.9 || !py.Met || py.Judged == quick || !strings.Contains(py.Note, "1.20×") {
			t.Errorf("quick %v: python target %+v", quick, py)
		}
		if !strings.HasPrefix(awk.Name, "awk word count") || awk.Value != 2.5 || awk.Judged || awk.Want != "reported" {
			t.Errorf("quick %v: awk target %+v: reported, never judged", quick, awk)
		}
	}
	p.Rounds[0].Python.ClusterS, p.Rounds[2].Python.ClusterS = 30, 30
	p.PythonJob = summarizePrograms(p.Rounds, pythonOf)
	if py := programTargets(&Config{}, p)[0]; py.Met || !py.Judged || py.Value != 1.5 {
		t.Errorf("slower than one process: %+v, want judged and missed", py)
	}
	skipped := programTargets(&Config{}, &Programs{Skipped: "python3 is not installed"})
	if len(skipped) != 1 || skipped[0].Judged || !strings.Contains(skipped[0].Note, "python3 is not installed") {
		t.Errorf("skipped: %+v, want one target, not judged, naming why", skipped)
	}
	if programTargets(&Config{}, nil) != nil {
		t.Error("no programs section: targets")
	}
}
