package main

import (
	"context"
	"fmt"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// stragglerSlowdown is how many times slower the straggler's map steps are (issue 12: "one worker
// 10× slower").
const stragglerSlowdown = 10

// straggler measures the tail one slow worker adds to a job, which backup tasks are for. A job
// runs on StragglerWorkers workers whose map steps take StragglerDelay, and on as many where w1
// takes ten times as long (w1 pulls shards like the others). One slow worker of N leaves
// N − 0.9 workers' worth of capacity. So no scheduler beats the no-straggler makespan × N ÷
// (N − 0.9), the capacity bound. A scheduler can remove the rest: mostly the slow worker's tail.
// The same on Workers workers (3), where the bound alone is 1.43×, is reported, not judged.
func (r *runner) straggler(ctx context.Context) error {
	cfg := r.cfg
	st := &report.Straggler{}
	run, err := r.stragglerRun(ctx, "strag", cfg.StragglerWorkers, cfg.StragglerShards)
	if err != nil {
		return err
	}
	st.StragglerRun = run
	if cfg.StragglerSmallShards > 0 {
		small, err := r.stragglerRun(ctx, "stragsm", cfg.Workers, cfg.StragglerSmallShards)
		if err != nil {
			return err
		}
		st.Small = &small
	}
	r.rep.Straggler = st
	return nil
}

// stragglerRun runs the comparison on two clusters of n workers, idle in turn. StragglerRuns
// rounds of (without the straggler, with it) let outside load weigh on both alike. The best
// makespan of each counts.
func (r *runner) stragglerRun(ctx context.Context, name string, n, shards int) (report.StragglerRun, error) {
	cfg := r.cfg
	job := knownjobs.Sleep(shards, "")
	st := report.StragglerRun{Workers: n, Shards: shards, Runs: cfg.StragglerRuns, DelayS: cfg.StragglerDelay.Seconds(),
		StragglerS: stragglerSlowdown * cfg.StragglerDelay.Seconds(), Bound: rig.Round3(float64(n) / (float64(n) - 1 + 1.0/stragglerSlowdown)), Exact: true}
	type side struct {
		c                                *cluster.Cluster
		sn                               *rig.Sniffer
		what                             string
		spans, backups, dups, w1s, lasts []float64
	}
	var sides [2]*side
	for i := range sides {
		spec := rig.Spec{Name: name + "0", Workers: n, LeaseDuration: cfg.LeaseDuration, MapDelay: cfg.StragglerDelay}
		what := fmt.Sprintf("straggler, %d workers: reference", n)
		if i == 1 {
			spec.Name = name + "1"
			spec.WorkerEnv = map[string][]string{"w1": {"MAP_DELAY=" + (stragglerSlowdown * cfg.StragglerDelay).String()}}
			what = fmt.Sprintf("straggler, %d workers: w1 10× slower", n)
		}
		c, sn, stop, err := r.rig.StartSniffed(ctx, spec)
		if err != nil {
			return st, err
		}
		defer stop()
		sides[i] = &side{c: c, sn: sn, what: what}
	}
	for k := range cfg.StragglerRuns {
		for _, x := range sides {
			o, err := r.runJob(ctx, x.c, job, fmt.Sprintf("%s %d/%d", x.what, k+1, cfg.StragglerRuns), job.Shards)
			results, _ := x.sn.Take(o.ID)
			backedUp := x.sn.BackupsOf(o.ID)
			if err != nil {
				return st, err
			}
			st.Exact = st.Exact && o.Exact
			if !o.Exact || o.Makespan <= 0 {
				continue
			}
			backups := len(backedUp)
			w1, dups := 0, 0
			count := make(map[int]int, shards)
			for _, res := range results {
				if res.Worker == "w1" {
					w1++
				}
				if count[res.Index]++; count[res.Index] == 2 {
					dups++
				}
			}
			if d := rig.LastPercent(results, shards); d > 0 {
				x.lasts = append(x.lasts, rig.Round3(d.Seconds()))
			}
			x.spans = append(x.spans, rig.Round3(o.Makespan.Seconds()))
			x.backups = append(x.backups, float64(backups))
			x.dups = append(x.dups, float64(dups))
			x.w1s = append(x.w1s, float64(w1))
		}
	}
	ref, slow := sides[0], sides[1]
	st.Reference, st.ReferenceBackups, st.ReferenceLastPercent = rig.Summarize(ref.spans), rig.Summarize(ref.backups), rig.Summarize(ref.lasts)
	st.Makespan, st.Backups, st.Duplicates, st.StragglerDone, st.LastPercent = rig.Summarize(slow.spans), rig.Summarize(slow.backups), rig.Summarize(slow.dups), rig.Summarize(slow.w1s), rig.Summarize(slow.lasts)
	if st.Reference.N > 0 && st.Makespan.N > 0 {
		st.ReferenceS, st.MakespanS = st.Reference.Min, st.Makespan.Min
		st.Ratio = rig.Round3(st.MakespanS / st.ReferenceS)
		st.TailS = rig.Round3(st.MakespanS - st.ReferenceS*st.Bound)
	}
	r.log.Logf("straggler, %d workers: %d shards, best makespan %.2fs against %.2fs without the straggler (×%.3f; capacity bound ×%.3f, %.2fs over it); "+
		"per job: the last 1%% of shards took %.3fs (%.3fs without the straggler), the straggler returned %.0f results, %.0f shards backed up (%.0f without the straggler), %.0f duplicate results (medians of %d)",
		n, st.Shards, st.MakespanS, st.ReferenceS, st.Ratio, st.Bound, st.TailS, st.LastPercent.P50, st.ReferenceLastPercent.P50,
		st.StragglerDone.P50, st.Backups.P50, st.ReferenceBackups.P50, st.Duplicates.P50, st.Makespan.N)
	return st, nil
}
