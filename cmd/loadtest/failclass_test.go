package main

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Issue 21's targets per failure class, judged at their edges.
func TestClassTargets_Thresholds(t *testing.T) {
	cfg := DefaultConfig()
	judge := func(fc FailClass, name string) Target {
		t.Helper()
		for _, x := range targets(&cfg, &Report{FailClasses: []FailClass{fc}}) {
			if strings.HasPrefix(x.Name, name) {
				return x
			}
		}
		t.Fatalf("no target %q", name)
		return Target{}
	}
	exact := func(c string) FailClass { return FailClass{Class: c, Runs: 10, Exact: 10} }
	with := func(fc FailClass, f func(*FailClass)) FailClass { f(&fc); return fc }
	for _, c := range []struct {
		name   string
		fc     FailClass
		target string
		met    bool
	}{
		{"sigkill 0.3 s", with(exact(scClassKill), func(f *FailClass) { f.ToLeader = rig.Dist{N: 10, P90: 0.3} }), "SIGKILL class p90: fault → new leader", true},
		{"sigkill 0.31 s", with(exact(scClassKill), func(f *FailClass) { f.ToLeader = rig.Dist{N: 10, P90: 0.31} }), "SIGKILL class p90: fault → new leader", false},
		{"sigkill merge 0.41 s", with(exact(scClassKill), func(f *FailClass) { f.ToFirstMerge = rig.Dist{N: 10, P90: 0.41} }), "SIGKILL class p90: fault → its first merge", false},
		{"sigkill fast but inexact", with(exact(scClassKill), func(f *FailClass) { f.Exact = 9; f.ToLeader = rig.Dist{N: 10, P90: 0.2} }), "SIGKILL class p90: fault → new leader", false},
		{"sigstop 1.5 s", with(exact(scClassStop), func(f *FailClass) { f.ToLeader = rig.Dist{N: 10, P90: 1.5} }), "class-sigstop p90", true},
		{"nats cut 1.6 s", with(exact(scClassNATSCut), func(f *FailClass) { f.ToLeader = rig.Dist{N: 10, P90: 1.6} }), "class-nats-cut p90", false},
		{"sigstop, a write after the break", with(exact(scClassStop), func(f *FailClass) { f.OldWrites = 1 }), "class-sigstop: checkpoints of the deposed leader", false},
		{"nats cut, no write after the break", exact(scClassNATSCut), "class-nats-cut: checkpoints of the deposed leader", true},
		{"nats restart, no change", exact(scClassNATSRestart), "NATS server SIGKILLed", true},
		{"nats restart, one change", with(exact(scClassNATSRestart), func(f *FailClass) { f.LeaderChanges = 1 }), "NATS server SIGKILLed", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.fc, c.target); got.Met != c.met {
				t.Errorf("%s: met %v, want %v (%+v)", c.target, got.Met, c.met, got)
			}
		})
	}
}

func TestFailClass_Summarize(t *testing.T) {
	fc := FailClass{Class: scClassKill, Results: []ClassRun{
		{Exact: true, NewEpoch: 2, ToLeaderS: 0.2, ToFirstMergeS: 0.25, Path: string(election.EventNoResponders), DetectS: 0.18, BreakS: 0.19, LeaderChanges: 1},
		{Exact: true, NewEpoch: 3, ToLeaderS: 1.4, ToFirstMergeS: 1.5, Path: string(election.EventSuspected), DetectS: 1.3, BreakS: 1.35, LeaderChanges: 1},
		{Error: "lost"},
	}}
	fc.Summarize()
	if fc.Runs != 3 || fc.Exact != 2 || fc.LeaderChanges != 2 || fc.ByProbe != 1 {
		t.Fatalf("runs %d exact %d changes %d by probe %d, want 3 2 2 1", fc.Runs, fc.Exact, fc.LeaderChanges, fc.ByProbe)
	}
	if fc.ToLeader.N != 2 || fc.ToLeader.Max != 1.4 || fc.Detect.N != 2 || fc.Break.N != 2 || fc.StreamLeader.N != 0 {
		t.Fatalf("distributions: %+v %+v %+v %+v", fc.ToLeader, fc.Detect, fc.Break, fc.StreamLeader)
	}
}

func TestValidate_FailClassEnv(t *testing.T) {
	cfg := DefaultConfig()
	cfg.FailClassEnv = []string{"PROBE_AFTER=120ms"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("valid env refused: %v", err)
	}
	for _, bad := range []string{"probe_after=1s", "=1s", "PROBE_AFTER"} {
		cfg.FailClassEnv = []string{bad}
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "KEY=VALUE") {
			t.Errorf("env %q: %v, want a KEY=VALUE error", bad, err)
		}
	}
}
