package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// runner owns what a run starts (the rig, which knows every pid it ever started).
type runner struct {
	cfg Config
	rig *rig.Rig
	out io.Writer
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// Run runs the reference jobs and every fault of cfg, and returns the report. It stops everything
// it started before it returns, whatever happens (ctx ending included).
func Run(ctx context.Context, cfg Config, out io.Writer) (*report.Matrix, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, out: out}
	rep := &report.Matrix{Header: rig.NewHeader(cfg.Quick), Settings: report.MatrixSettings{Workers: cfg.Workers, Concurrency: 2,
		LeaseS: cfg.LeaseDuration.Seconds(), ShardTimeoutS: cfg.ShardTimeout.Seconds(), At: cfg.At, DeadlineS: cfg.Deadline.Seconds(),
		CancelWithinS: cfg.CancelWithin.Seconds()}}
	defer rep.End()
	var err error
	if r.rig, err = rig.New(ctx, rig.Options{Dir: cfg.Dir, WorkerBin: cfg.WorkerBin, NATSBin: cfg.NATSBin, Logf: r.logf}); err != nil {
		return nil, err
	}
	defer r.rig.Close()
	faults := selectFaults(cfg.Faults)

	// The reference: each job the faults use, once, without a fault.
	refs := map[string]float64{}
	for _, j := range referenceJobs(cfg, faults) {
		if ctx.Err() != nil {
			break
		}
		ms, err := r.reference(ctx, j)
		if err != nil {
			rep.Incomplete = fmt.Sprintf("reference run of %s: %v", j, err)
			return rep, errors.New(rep.Incomplete)
		}
		refs[j.String()] = ms
		rep.References = append(rep.References, report.Reference{Job: j.String(), MakespanS: ms})
	}
	for _, f := range faults {
		if ctx.Err() != nil {
			rep.Incomplete = "interrupted"
			break
		}
		res := r.runFault(ctx, f, refs)
		r.logf("%s: %s %s", f.name, res.Verdict, res.Problem)
		rep.Results = append(rep.Results, res)
	}
	r.rig.Close()
	rep.LeftRunning = r.rig.LeftRunning()
	rep.Tally()
	return rep, ctx.Err()
}

// referenceJobs lists the distinct jobs the faults run.
func referenceJobs(cfg Config, faults []fault) []knownjobs.Job {
	seen := map[string]bool{}
	var out []knownjobs.Job
	for _, f := range faults {
		if f.expectCancel {
			continue
		}
		j := f.job(cfg)
		if !seen[j.String()] {
			seen[j.String()] = true
			out = append(out, j)
		}
	}
	return out
}

// reference runs j once on a fresh cluster and returns its makespan in seconds.
func (r *runner) reference(ctx context.Context, j knownjobs.Job) (float64, error) {
	c, err := r.startCluster(ctx, fmt.Sprintf("reference-%s-%d", j.Type, j.Shards), r.cfg.mapDelay(j), false)
	if err != nil {
		return 0, err
	}
	defer r.rig.Stop(c)
	o, err := rig.Reference(ctx, c, j, r.cfg.Deadline+time.Duration(j.Shards)*r.cfg.ShardDelay, nil)
	if err != nil {
		return 0, err
	}
	r.logf("reference %s: %.2f s", j, o.Makespan.Seconds())
	return rig.Round3(o.Makespan.Seconds()), nil
}

// startCluster starts a cluster with servers of its own for name. mapDelay slows every map step
// (see Config.mapDelay); testWorker runs the test worker, which knows the bad job types.
func (r *runner) startCluster(ctx context.Context, name string, mapDelay time.Duration, testWorker bool) (*cluster.Cluster, error) {
	start := time.Now()
	c, err := r.rig.Start(ctx, rig.Spec{Name: name, TestWorker: testWorker, Workers: r.cfg.Workers, LeaseDuration: r.cfg.LeaseDuration,
		ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2, MapDelay: mapDelay})
	if err == nil {
		if err = prepareKeyed(ctx, name, c); err != nil { // keyed.go
			r.rig.Stop(c)
			return nil, err
		}
		r.logf("%s: cluster up in %v (logs in %s)", name, time.Since(start).Round(time.Millisecond), c.Options().Dir)
	}
	return c, err
}

func sleep(ctx context.Context, d time.Duration) { _ = rig.Sleep(ctx, d) }
