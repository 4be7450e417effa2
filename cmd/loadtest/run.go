package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"
)

// runner carries one load-test run: its configuration, what it started and the report.
type runner struct {
	cfg *Config
	env *env
	log *progress

	mu  sync.Mutex
	rep *Report
}

// account adds one job's outcome to the correctness totals.
func (r *runner) account(o outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Jobs++
	switch {
	case o.lost:
		r.rep.LostJobs++
		r.rep.Errors = append(r.rep.Errors, "lost: "+o.problem)
	case !o.exact:
		r.rep.WrongResults++
		r.rep.Errors = append(r.rep.Errors, "wrong: "+o.problem)
	}
}

func (r *runner) errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Errors = append(r.rep.Errors, fmt.Sprintf(format, args...))
}

// Run runs the scenarios of cfg, showing progress on out, and returns the report with the
// timelines of the runs worth plotting. The error is a failure to run (servers, clusters,
// Ctrl-C); wrong results and lost jobs are in the report. Everything it starts is stopped
// before it returns.
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, []*timeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	rep := &Report{Version: 1, StartedAt: time.Now().UTC(), Quick: cfg.Quick, Seed: cfg.Seed, Scenarios: cfg.Scenarios,
		Machine: Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()},
		Settings: Settings{Workers: cfg.Workers, Concurrency: cfg.Concurrency, ThroughputConcurrency: cfg.ThroughputConcurrency,
			LeaseS: cfg.LeaseDuration.Seconds(), ShardTimeoutS: cfg.ShardTimeout.Seconds(), MapDelayS: cfg.MapDelay.Seconds(),
			FailoverShards: cfg.FailoverShards, Parallel: cfg.Parallel, InFlightBound: 2*cfg.Concurrency + 1,
			Attached: cfg.ConnStr != "" || cfg.NATSURL != "", WorkerBin: cfg.WorkerBin}}
	start := time.Now()
	defer func() { rep.DurationS = round3(time.Since(start).Seconds()) }()
	log := newProgress(out)
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "loadtest-")
		if err != nil {
			return nil, nil, err
		}
		cfg.Dir = d
	}
	log.Logf("load test (seed %d) in %s", cfg.Seed, cfg.Dir)
	e, err := newEnv(ctx, &cfg, log)
	if err != nil {
		return rep, nil, err
	}
	defer e.close()
	r := &runner{cfg: &cfg, env: e, log: log, rep: rep}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{scThroughput, r.throughput},
		{scEfficiency, r.efficiency},
		{"failover", r.failover},
	}
	var runErr error
	for _, s := range steps {
		if s.name != "failover" && !cfg.has(s.name) {
			continue
		}
		if err := s.fn(ctx); err != nil {
			runErr = fmt.Errorf("%s: %w", s.name, err)
			if ctx.Err() != nil {
				rep.Incomplete = "interrupted: " + context.Cause(ctx).Error()
				break
			}
			r.errorf("%v", runErr)
			rep.Incomplete = runErr.Error()
		}
	}
	e.close()
	rep.Targets = targets(&cfg, rep)
	if runErr == nil && rep.correct() && !cfg.Keep {
		_ = os.RemoveAll(cfg.Dir)
	} else {
		log.Logf("logs kept in %s", cfg.Dir)
	}
	return rep, plotted(rep), runErr
}

// summarizeFailover fills the failover sections of the report from the runs.
func (r *runner) summarizeFailover(runs []FailoverRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	bound := r.rep.Settings.InFlightBound
	byKind := map[string][]FailoverRun{}
	for _, run := range runs {
		byKind[run.Kind] = append(byKind[run.Kind], run)
		r.rep.RedoneShards += run.Redone
		r.rep.CompletedRerun += run.CompletedRerun
		// The bound holds for SIGKILL: a killed process holds at most that many shards. A process
		// stopped with SIGTERM goes on taking shards (and handing them back) until it is done.
		if killedOnly(run) && run.Redelivered > bound*len(run.Kills) {
			r.rep.RedoneOverBound++
		}
	}
	leader := func(runs []FailoverRun) *LeaderFailover {
		if len(runs) == 0 {
			return nil
		}
		var toLeader, toMerge, redone, dups, lost, exit []float64
		for _, run := range runs {
			for _, k := range run.Kills {
				exit = append(exit, k.ExitS)
				if k.Leader && k.NewLeader != "" {
					toLeader = append(toLeader, k.ToLeaderS)
				}
				if k.MergeSeen {
					toMerge = append(toMerge, k.ToMergeS)
				}
			}
			if run.Error == "" || run.Exact {
				redone = append(redone, float64(run.Redone))
				dups = append(dups, float64(run.Duplicates))
				if run.MakespanS > 0 {
					lost = append(lost, run.TimeLostS)
				}
			}
		}
		lf := &LeaderFailover{ToLeader: dist(toLeader), ToFirstMerge: dist(toMerge), Redone: dist(redone),
			Duplicates: dist(dups), TimeLost: dist(lost), Exit: dist(exit), Runs: runs}
		lf.P50S, lf.P90S, lf.MaxS = lf.ToLeader.P50, lf.ToLeader.P90, lf.ToLeader.Max
		return lf
	}
	r.rep.Failover.Crash = leader(byKind[scCrash])
	r.rep.Failover.Graceful = leader(byKind[scGraceful])
	if wr := byKind[scWorkerCrash]; len(wr) > 0 {
		var lost, redone []float64
		for _, run := range wr {
			if run.MakespanS > 0 {
				lost = append(lost, run.TimeLostS)
			}
			redone = append(redone, float64(run.Redone))
		}
		r.rep.WorkerCrash = &WorkerCrash{TimeLost: dist(lost), Redone: dist(redone), Runs: wr}
	}
}

// killedOnly reports whether every signal of run was SIGKILL (and there was one).
func killedOnly(run FailoverRun) bool {
	for _, k := range run.Kills {
		if k.Signal != "SIGKILL" {
			return false
		}
	}
	return len(run.Kills) > 0
}

// targets judges the targets. In a quick run only correctness is judged.
func targets(cfg *Config, rep *Report) []Target {
	var ts []Target
	speed := !cfg.Quick
	if tp := rep.Throughput; tp != nil {
		ts = append(ts, Target{Name: "throughput ratio (system ÷ baseline)", Want: "≥ 0.5", Value: tp.Ratio,
			Met: tp.Ratio >= 0.5, Judged: speed && tp.BaselinePerS > 0})
	}
	if e := rep.Efficiency; e != nil {
		ts = append(ts, Target{Name: fmt.Sprintf("efficiency (ideal ÷ makespan, %v shards)", cfg.EfficiencyDuration), Want: "≥ 0.95",
			Value: e.Ratio, Met: e.Ratio >= 0.95, Judged: speed && e.MakespanS > 0})
	}
	if c := rep.Failover.Crash; c != nil {
		lim := cfg.LeaseDuration.Seconds() + 2
		ts = append(ts, Target{Name: "crash failover p90 (to new leader)", Want: fmt.Sprintf("≤ %.0f s (lease + 2 s)", lim), Value: c.P90S, Unit: "s",
			Met: c.ToLeader.N > 0 && c.P90S <= lim, Judged: speed && c.ToLeader.N > 0})
	}
	if g := rep.Failover.Graceful; g != nil {
		ts = append(ts, Target{Name: "graceful handover p90 (to new leader)", Want: "≤ 1 s", Value: g.P90S, Unit: "s",
			Met: g.ToLeader.N > 0 && g.P90S <= 1, Judged: speed && g.ToLeader.N > 0})
	}
	ts = append(ts,
		Target{Name: "wrong results", Want: "0", Value: float64(rep.WrongResults), Met: rep.WrongResults == 0, Judged: true},
		Target{Name: "lost jobs", Want: "0", Value: float64(rep.LostJobs), Met: rep.LostJobs == 0, Judged: true},
	)
	if rep.Failover.Crash != nil || rep.Failover.Graceful != nil || rep.WorkerCrash != nil {
		ts = append(ts,
			Target{Name: "completed shards re-run after a kill", Want: "0", Value: float64(rep.CompletedRerun),
				Met: rep.CompletedRerun == 0, Judged: speed,
				Note: "only shards in flight on the killed process may run twice"},
			Target{Name: "SIGKILL runs with more shards redone than the victims held", Want: "0", Value: float64(rep.RedoneOverBound),
				Met: rep.RedoneOverBound == 0, Judged: speed,
				Note: fmt.Sprintf("a process holds ≤ %d: 2 × concurrency + 1", rep.Settings.InFlightBound)},
		)
	}
	return ts
}

// correct reports whether the run produced only exact results and lost no job.
func (rep *Report) correct() bool { return rep.WrongResults == 0 && rep.LostJobs == 0 }

// missed lists the judged targets that were not met.
func (rep *Report) missed() []Target {
	var out []Target
	for _, t := range rep.Targets {
		if t.Judged && !t.Met {
			out = append(out, t)
		}
	}
	return out
}
