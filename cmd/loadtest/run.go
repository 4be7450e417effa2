package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// runner carries one load-test run: its configuration, what it started and the report.
type runner struct {
	cfg *Config
	rig *rig.Rig
	log *rig.Progress

	// mu guards rep's totals and errors: failover runs go side by side. The scenarios run one
	// after another and set their own sections.
	mu  sync.Mutex
	rep *Report
}

// account adds one job's rig.Outcome to the correctness totals.
func (r *runner) account(o rig.Outcome) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.Jobs++
	switch {
	case o.Lost:
		r.rep.LostJobs++
		r.rep.Errors = append(r.rep.Errors, "lost: "+o.Problem)
	case !o.Exact:
		r.rep.WrongResults++
		r.rep.Errors = append(r.rep.Errors, "wrong: "+o.Problem)
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
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, []*rig.Timeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	rep := &Report{Header: rig.NewHeader(cfg.Quick), Seed: cfg.Seed, Scenarios: cfg.Scenarios,
		Settings: Settings{Workers: cfg.Workers, Concurrency: cfg.Concurrency, ThroughputConcurrency: cfg.ThroughputConcurrency,
			LeaseS: cfg.LeaseDuration.Seconds(), ShardTimeoutS: cfg.ShardTimeout.Seconds(), MapDelayS: cfg.MapDelay.Seconds(),
			FailoverShards: cfg.FailoverShards, Parallel: cfg.Parallel, InFlightBound: 2*cfg.Concurrency + 1,
			Attached: cfg.ConnStr != "" || cfg.NATSURL != "", WorkerBin: cfg.WorkerBin}}
	defer rep.End()
	log := rig.NewProgress(out)
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "loadtest-")
		if err != nil {
			return nil, nil, err
		}
		cfg.Dir = d
	}
	log.Logf("load test (seed %d) in %s", cfg.Seed, cfg.Dir)
	rg, err := rig.New(ctx, rig.Options{Dir: cfg.Dir, WorkerBin: cfg.WorkerBin, Shared: true, ConnStr: cfg.ConnStr, NATSURL: cfg.NATSURL, Logf: log.Logf})
	if err != nil {
		return rep, nil, err
	}
	defer rg.Close()
	r := &runner{cfg: &cfg, rig: rg, log: log, rep: rep}
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{scThroughput, r.throughput},
		{scEfficiency, r.efficiency},
		{scSmallJob, r.smallJob},
		{scWordcount, r.wordcount},
		{scStraggler, r.straggler},
		{"failover", r.failover},
		{scMillion, r.million},
		{scOutage, r.outage},
		{scNATSCluster, r.natsClusterRun},
		{"failure classes", r.failClasses},
		{scLoaded, r.loaded},
		{scKeyed, r.keyed},
		{scScale, r.scale},
	}
	var runErr error
	for _, s := range steps {
		if s.name != "failover" && s.name != "failure classes" && !cfg.has(s.name) {
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
	rg.Close()
	for _, p := range rg.LeftRunning() {
		r.errorf("left running: %s", p)
	}
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
		lf := &LeaderFailover{ToLeader: rig.Summarize(toLeader), ToFirstMerge: rig.Summarize(toMerge), Redone: rig.Summarize(redone),
			Duplicates: rig.Summarize(dups), TimeLost: rig.Summarize(lost), Exit: rig.Summarize(exit), Runs: runs}
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
		r.rep.WorkerCrash = &WorkerCrash{TimeLost: rig.Summarize(lost), Redone: rig.Summarize(redone), Runs: wr}
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
