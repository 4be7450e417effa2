package main

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/jobs"
)

// SmallCLI is the small job against its bare compute (issue 32): the median through the client
// library (report.SmallJob) and through the CLI, each ÷ the compute alone.
type SmallCLI struct {
	// ComputeS is the job's bare compute: Split and every shard's Map in this process, one
	// goroutine a core, no coordination (median of ComputeRuns); ComputeCPUS its CPU-seconds.
	ComputeS    float64 `json:"compute_s"`
	ComputeCPUS float64 `json:"compute_cpu_s"`
	ComputeRuns int     `json:"compute_runs"`
	// ClientS is report.SmallJob's median (submit → finished through the client library).
	ClientS     float64 `json:"client_median_s"`
	ClientRatio float64 `json:"client_ratio"` // ClientS ÷ ComputeS
	// ClientCPUS is the median CPU-seconds of every process (workers, NATS and client, Azurite)
	// from submit to the job seen finished.
	ClientCPUS float64 `json:"client_cpu_s"`
	// CLI is `worker submit --type primes --params … --wait` from exec to exit, every run
	// checked; CLIRatio its median ÷ ComputeS.
	CLI      rig.Dist  `json:"cli_s"`
	CLIS     []float64 `json:"cli_runs_s"`
	CLIRatio float64   `json:"cli_ratio"`
	Command  string    `json:"command"`
}

// smallJob is issue 12's and 32's latency figure: primes below 2·10^7 in 200 shards, on an idle
// cluster at default settings, through the client library (the median of SmallJobRuns) and the
// CLI (SmallJobCLIRuns), each against the job's bare compute in this process.
func (r *runner) smallJob(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "small", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	job := knownjobs.Primes(20_000_000, 200)
	sj := &SmallJob{}
	var spans, planned, clientCPU []float64
	// One warm-up job: the first job of a cluster creates its consumers.
	if _, err := r.runJob(ctx, c, job, "small job (warm-up)", 200); err != nil {
		return err
	}
	r.log.Phase(fmt.Sprintf("small job through the client, %d runs", cfg.SmallJobRuns), cfg.SmallJobRuns)
	for range cfg.SmallJobRuns {
		time.Sleep(300 * time.Millisecond) // idle: the previous job's last checkpoint and acks are done
		cpu0 := r.rig.CPU(c)
		id, start, err := rig.Submit(ctx, c, job)
		if err != nil {
			return err
		}
		o, err := rig.Await(ctx, c, job, id, start, cfg.JobTimeout, nil)
		if err != nil {
			return err
		}
		cpu := r.rig.CPU(c).Sub(cpu0)
		clientCPU = append(clientCPU, cpu.Total().Seconds())
		r.account(o)
		r.log.Add(1)
		sj.Runs++
		if o.Exact {
			sj.Exact++
			spans = append(spans, rig.Round3(o.Makespan.Seconds()))
			if p := rig.PlannedAt(c, o.ID); !p.IsZero() {
				planned = append(planned, rig.Round3(p.Sub(o.Start).Seconds()))
			}
		} else {
			r.log.Logf("small job: %s", o.Problem)
		}
	}
	r.log.Done()
	sj.Makespan, sj.Planned = rig.Summarize(spans), rig.Summarize(planned)
	sj.MedianS = sj.Makespan.P50
	r.rep.SmallJob = sj
	r.log.Logf("small job: primes below 2·10^7 in 200 shards: submit→finished p50 %.3fs, p90 %.3fs (%d of %d exact)", sj.Makespan.P50, sj.Makespan.P90, sj.Exact, sj.Runs)

	sc := &SmallCLI{ClientS: sj.MedianS, ClientCPUS: median(clientCPU), Command: fmt.Sprintf("worker submit --type %s --params '%s' --wait", job.Type, job.Params)}
	r.rep.SmallCLI = sc
	if cfg.SmallJobCLIRuns > 0 {
		r.log.Phase(fmt.Sprintf("small job through the CLI, %d runs", cfg.SmallJobCLIRuns), cfg.SmallJobCLIRuns)
		for range cfg.SmallJobCLIRuns {
			time.Sleep(300 * time.Millisecond)
			s, out, err := rig.TimeCommandOutput(ctx, c, "submit", "--type", job.Type, "--params", string(job.Params), "--wait")
			if err != nil {
				return err
			}
			if err := job.Check(out); err != nil {
				r.errorf("small job through the CLI: %v", err)
				r.mu.Lock()
				r.rep.WrongResults++
				r.mu.Unlock()
				continue
			}
			sc.CLIS = append(sc.CLIS, s)
			r.log.Add(1)
		}
		r.log.Done()
		sc.CLI = rig.Summarize(sc.CLIS)
		r.log.Logf("small job through the CLI (exec to exit): p50 %.3fs, p90 %.3fs", sc.CLI.P50, sc.CLI.P90)
	}
	// The bare compute: 21 runs, the median counts.
	var walls, cpus []float64
	for range 21 {
		w, cpu, err := primesCompute(ctx, job)
		if err != nil {
			return fmt.Errorf("bare compute: %w", err)
		}
		walls, cpus = append(walls, w.Seconds()), append(cpus, cpu.Seconds())
	}
	sc.ComputeS, sc.ComputeCPUS, sc.ComputeRuns = median(walls), median(cpus), len(walls)
	if sc.ComputeS > 0 {
		sc.ClientRatio = rig.Round3(sc.ClientS / sc.ComputeS)
		sc.CLIRatio = rig.Round3(sc.CLI.P50 / sc.ComputeS)
	}
	r.log.Logf("small job: bare compute %.3f s (%.3f CPU-s, one goroutine a core); client %.1f×, CLI %.1f×", sc.ComputeS, sc.ComputeCPUS, sc.ClientRatio, sc.CLIRatio)
	return nil
}

// primesCompute runs j (a primes job) without a cluster: Split, then every shard's Map on one
// goroutine a core, partials merged; it checks the answer and returns the wall time and the
// CPU-seconds of this process meanwhile.
func primesCompute(ctx context.Context, j knownjobs.Job) (time.Duration, time.Duration, error) {
	pj, err := builtin.Registry().Lookup(j.Type)
	if err != nil {
		return 0, 0, err
	}
	cpu0, start := rig.SelfCPU(), time.Now()
	shards, err := pj.Split(ctx, nil, j.Params)
	if err != nil {
		return 0, 0, err
	}
	agg, err := pj.NewAggregate(j.Params)
	if err != nil {
		return 0, 0, err
	}
	partials := make([][]byte, len(shards))
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, runtime.GOMAXPROCS(0))
	for g := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < len(shards); i = int(next.Add(1) - 1) {
				p, err := pj.Map(ctx, nil, jobs.Task{Index: i, Attempt: 1, Shard: shards[i]})
				if err != nil {
					errs[g] = err
					return
				}
				partials[i] = p
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	for _, p := range partials {
		if err := agg.Merge(p); err != nil {
			return 0, 0, err
		}
	}
	res, err := agg.Result()
	wall, cpu := time.Since(start), rig.SelfCPU()-cpu0
	if err != nil {
		return 0, 0, err
	}
	return wall, cpu, j.Check(res)
}

// smallTargets judges the small job against its bare compute.
func smallTargets(cfg *Config, sc *SmallCLI) []Target {
	if sc == nil {
		return nil
	}
	speed := !cfg.Quick
	note := fmt.Sprintf("bare compute %s s (one goroutine a core, %s CPU-s); the job %s CPU-s, every process", rig.Num(sc.ComputeS), rig.Num(sc.ComputeCPUS), rig.Num(sc.ClientCPUS))
	ts := []Target{{Name: "small job (primes below 2·10^7, 200 shards) through the client ÷ its bare compute, median", Want: "≤ 2",
		Value: sc.ClientRatio, Unit: "×", Met: sc.ClientRatio > 0 && sc.ClientRatio <= 2, Judged: speed && sc.ClientRatio > 0,
		Note: fmt.Sprintf("%s s; %s", rig.Num(sc.ClientS), note)}}
	if sc.CLI.N > 0 {
		ts = append(ts, Target{Name: "small job through the CLI (worker submit --wait, exec to exit) ÷ its bare compute, median", Want: "≤ 3",
			Value: sc.CLIRatio, Unit: "×", Met: sc.CLIRatio > 0 && sc.CLIRatio <= 3, Judged: speed && sc.CLIRatio > 0,
			Note: fmt.Sprintf("%s s over %d runs; %s", rig.Num(sc.CLI.P50), sc.CLI.N, note)})
	}
	return ts
}

// writeSmallFigures adds the small job's rows to the figures table.
func writeSmallFigures(row func(string, rig.Dist), sc *SmallCLI) {
	if sc == nil {
		return
	}
	row("small job through the CLI (worker submit --wait), exec to exit, s", sc.CLI)
	row("small job, bare compute (one goroutine a core, no coordination), s", rig.Single(sc.ComputeS, sc.ComputeS > 0))
	row("small job through the client ÷ bare compute", rig.Single(sc.ClientRatio, sc.ClientRatio > 0))
	row("small job through the client, CPU-seconds of every process", rig.Single(sc.ClientCPUS, sc.ClientCPUS > 0))
	row("small job through the CLI ÷ bare compute", rig.Single(sc.CLIRatio, sc.CLIRatio > 0))
}
