package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/mapagg/mapagg/internal/harness/report"
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
	r.rep.Account(o)
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
	rep := &Report{Load: report.Load{Header: rig.NewHeader(cfg.Quick), Seed: cfg.Seed, Scenarios: cfg.Scenarios,
		Settings: report.LoadSettings{Workers: cfg.Workers, Concurrency: cfg.Concurrency, ThroughputConcurrency: cfg.ThroughputConcurrency,
			LeaseS: cfg.LeaseDuration.Seconds(), ShardTimeoutS: cfg.ShardTimeout.Seconds(), MapDelayS: cfg.MapDelay.Seconds(),
			FailoverShards: cfg.FailoverShards, Parallel: cfg.Parallel, InFlightBound: 2*cfg.Concurrency + 1,
			Attached: cfg.ConnStr != "" || cfg.NATSURL != "", WorkerBin: cfg.WorkerBin}}}
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
		{"keyed scenarios", r.keyed},
		{scCSVSum, r.csvSum},
		{scPrograms, r.programs},
		{scLongRead, r.longRead},
		{scScale, r.scale},
		{scThousand, r.thousand},
		{scStatus, r.status},
		{scSchedules, r.schedules},
	}
	var runErr error
	for _, s := range steps {
		if s.name == "keyed scenarios" && !cfg.has(scKeyed) && !cfg.has(scKeyedLoaded) {
			continue
		}
		if s.name != "failover" && s.name != "failure classes" && s.name != "keyed scenarios" && !cfg.has(s.name) {
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
	if runErr == nil && rep.Correct() && !cfg.Keep {
		_ = os.RemoveAll(cfg.Dir)
	} else {
		log.Logf("logs kept in %s", cfg.Dir)
	}
	return rep, rep.Timelines(), runErr
}

// summarizeFailover fills the failover sections of the report from the runs.
func (r *runner) summarizeFailover(runs []report.FailoverRun) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rep.SummarizeFailover(runs)
}
