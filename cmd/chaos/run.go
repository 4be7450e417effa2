package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/queue"
)

// runner owns what a run starts (the rig, which knows every pid it ever started).
type runner struct {
	cfg     Config
	rig     *rig.Rig
	out     io.Writer
	testBin string // the test worker, for the bad-job faults (badjob.go)
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// Run runs the reference jobs and every fault of cfg, and returns the report. It stops everything
// it started before it returns, whatever happens (ctx ending included).
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, out: out}
	rep := &Report{Header: rig.NewHeader(cfg.Quick), Settings: settingsOf(cfg)}
	defer rep.End()
	var err error
	if r.rig, err = rig.New(ctx, rig.Options{Dir: cfg.Dir, WorkerBin: cfg.WorkerBin, NATSBin: cfg.NATSBin, Logf: r.logf}); err != nil {
		return nil, err
	}
	defer r.rig.Close()
	faults := selectFaults(cfg.Faults)
	if err := r.buildTestWorker(faults); err != nil {
		return nil, err
	}

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
		rep.References = append(rep.References, Reference{Job: j.String(), MakespanS: ms})
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
	rep.tally()
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
	e, err := r.startEnv(ctx, fmt.Sprintf("reference-%s-%d", j.Type, j.Shards), r.cfg.mapDelay(j))
	if err != nil {
		return 0, err
	}
	defer r.rig.Stop(e.c)
	o, err := rig.Reference(ctx, e.c, j, r.cfg.Deadline+time.Duration(j.Shards)*r.cfg.ShardDelay, nil)
	if err != nil {
		return 0, err
	}
	r.logf("reference %s: %.2f s", j, o.Makespan.Seconds())
	return rig.Round3(o.Makespan.Seconds()), nil
}

// env is one fault's cluster and the clients the run inspects it with.
type env struct {
	r    *runner
	name string
	c    *cluster.Cluster
	q    *queue.Queue
}

// startEnv starts a cluster with servers of its own for name; mapDelay slows every map step
// (see Config.mapDelay).
func (r *runner) startEnv(ctx context.Context, name string, mapDelay time.Duration) (*env, error) {
	start := time.Now()
	c, err := r.rig.Start(ctx, rig.Spec{Name: name, WorkerBin: r.workerBin(name), Workers: r.cfg.Workers, LeaseDuration: r.cfg.LeaseDuration,
		ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2, MapDelay: mapDelay})
	if err != nil {
		return nil, err
	}
	if err := prepareKeyed(ctx, name, c); err != nil { // keyed.go
		r.rig.Stop(c)
		return nil, err
	}
	e := &env{r: r, name: name, c: c}
	if e.q, err = queue.New(c.ConnStr, c.QueueName()); err != nil {
		r.rig.Stop(c)
		return nil, err
	}
	r.logf("%s: cluster up in %v (logs in %s)", name, time.Since(start).Round(time.Millisecond), c.Options().Dir)
	return e, nil
}

func (e *env) submit(ctx context.Context, j knownjobs.Job) (string, time.Time, error) {
	return rig.Submit(ctx, e.c, j)
}

// status reads a job's status, nil while it cannot be read (storage down, not yet written).
func (e *env) status(ctx context.Context, id string) *client.Status { return rig.Status(ctx, e.c, id) }

// waitEnd polls id until it ends; false, with the last status read, when deadline passed first.
func (e *env) waitEnd(ctx context.Context, id string, deadline time.Time) (*client.Status, bool) {
	return rig.WaitEnd(ctx, e.c, id, deadline)
}

func sleep(ctx context.Context, d time.Duration) { _ = rig.Sleep(ctx, d) }
func clip(s string, n int) string                { return rig.Clip(s, n) }
func describe(st *client.Status) string          { return rig.Describe(st) }
