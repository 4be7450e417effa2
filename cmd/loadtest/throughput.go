package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// throughput is scenario 1: zero-duration sleep jobs end to end, against the uncoordinated
// JetStream baseline. The baseline runs on the same NATS server with the same shard count and one
// consuming connection per worker. Rounds interleave a system job with every baseline variant, so
// load from outside the test weighs on both alike. The best of each counts.
func (r *runner) throughput(ctx context.Context) error {
	cfg := r.cfg
	tp := &report.Throughput{Shards: cfg.ThroughputShards, Concurrency: cfg.ThroughputConcurrency, ShardsPerMsg: rig.DispatchShardsPerMsg(cfg.ThroughputShards)}
	r.rep.Throughput = tp
	c, err := r.rig.Start(ctx, rig.Spec{Name: "tp", Concurrency: cfg.ThroughputConcurrency, LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	job := knownjobs.Sleep(cfg.ThroughputShards, "")
	var rates []float64
	for i := range cfg.ThroughputRuns {
		cpu0, st0 := rig.ClusterCPU(c), r.rig.CPU(c).Storage
		o, err := r.runJob(ctx, c, job, fmt.Sprintf("throughput %d/%d", i+1, cfg.ThroughputRuns), cfg.ThroughputShards)
		if err != nil {
			return err
		}
		cpu, st := rig.ClusterCPU(c)-cpu0, r.rig.CPU(c).Storage-st0
		if !o.Lost && o.Exact {
			run := report.ThroughputRun{Job: o.ID, SecondsE2E: rig.Round3(o.Makespan.Seconds()), Exact: o.Exact, Duplicates: o.Status.Duplicates,
				CPUMicros:        rig.Round3(float64(cpu.Microseconds()) / float64(cfg.ThroughputShards)),
				StorageCPUMicros: rig.Round3(float64(st.Microseconds()) / float64(cfg.ThroughputShards))}
			run.PerS = rig.Round3(float64(cfg.ThroughputShards) / o.Makespan.Seconds())
			run.PlannedS = rig.PlannedAfter(c, o)
			tp.Runs = append(tp.Runs, run)
			rates = append(rates, run.PerS)
			if run.PerS > tp.ShardsPerS {
				tp.CPUMicrosPerShard, tp.StorageCPUMicrosPerShard = run.CPUMicros, run.StorageCPUMicros
			}
			tp.ShardsPerS = max(tp.ShardsPerS, run.PerS)
			r.log.Logf("throughput %d: %d shards in %.2fs = %.0f shards/s (planned after %.2fs, %.1f µs CPU/shard, Azurite %.1f more), exact", i+1, cfg.ThroughputShards, run.SecondsE2E, run.PerS, run.PlannedS, run.CPUMicros, run.StorageCPUMicros)
		}

		// Every prefetch depth twice: batched as the dispatcher does (the yardstick) and one
		// message per shard (what a loop without batching does).
		pers := []int{tp.ShardsPerMsg}
		if tp.ShardsPerMsg > 1 {
			pers = append(pers, 1)
		}
		r.log.Phase(fmt.Sprintf("baseline %d/%d", i+1, cfg.ThroughputRuns), len(pers)*len(cfg.BaselinePrefetch))
		for k, pf := range cfg.BaselinePrefetch {
			for _, per := range pers {
				d, err := rig.Baseline(ctx, r.rig.NATSURL(), rig.BaselineOptions{Name: fmt.Sprintf("%sbase%d%d%d", r.rig.RunID(), i, k, per),
					Shards: cfg.ThroughputShards, Workers: cfg.Workers, Prefetch: pf, ShardsPerMsg: per})
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					r.errorf("baseline (prefetch %d, %d shards a message): %v", pf, per, err)
					continue
				}
				b := report.BaselineRun{Workers: cfg.Workers, Prefetch: pf, ShardsPerMsg: per, Seconds: rig.Round3(d.Seconds()), PerS: rig.Round3(float64(cfg.ThroughputShards) / d.Seconds())}
				tp.Baseline = append(tp.Baseline, b)
				if per == tp.ShardsPerMsg {
					tp.BaselinePerS = max(tp.BaselinePerS, b.PerS)
				}
				if per == 1 {
					tp.UnbatchedPerS = max(tp.UnbatchedPerS, b.PerS)
				}
				r.log.Add(1)
				r.log.Logf("baseline %d: %d connections × prefetch %d, shards a message %d: %.2fs = %.0f shards/s", i+1, b.Workers, pf, per, b.Seconds, b.PerS)
			}
		}
		r.log.Done()
	}
	tp.PerS = rig.Summarize(rates)
	if tp.BaselinePerS > 0 {
		tp.Ratio = rig.Round3(tp.ShardsPerS / tp.BaselinePerS)
	}
	if tp.UnbatchedPerS > 0 {
		tp.UnbatchedRatio = rig.Round3(tp.ShardsPerS / tp.UnbatchedPerS)
	}
	return nil
}

// efficiency is scenario 2: the makespan of shards of each duration over Workers × Concurrency
// slots, against the ideal (total work ÷ slots).
func (r *runner) efficiency(ctx context.Context) error {
	cfg := r.cfg
	c, sn, stop, err := r.rig.StartSniffed(ctx, rig.Spec{Name: "eff", Concurrency: cfg.Concurrency, LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer stop()
	for _, d := range cfg.EfficiencyDurations {
		shards := max(1, int(cfg.EfficiencyIdeal.Seconds()*float64(cfg.slots())/d.Seconds()))
		job := knownjobs.Sleep(shards, d.String())
		o, err := r.runJob(ctx, c, job, "efficiency "+d.String(), shards)
		if err != nil {
			return err
		}
		results, _ := sn.Take(o.ID)
		ideal := d.Seconds() * float64(shards) / float64(cfg.slots())
		e := report.Efficiency{Shards: shards, ShardS: d.Seconds(), Slots: cfg.slots(), IdealS: rig.Round3(ideal), Job: o.ID, Exact: o.Exact}
		if !o.Lost && o.Makespan > 0 {
			e.MakespanS = rig.Round3(o.Makespan.Seconds())
			e.Ratio = rig.Round3(ideal / o.Makespan.Seconds())
			e.MakespanOverIdeal = rig.Round3(o.Makespan.Seconds() / ideal)
			e.PlannedS = rig.PlannedAfter(c, o)
			var busy time.Duration
			for _, x := range results {
				busy += time.Duration(x.Micros) * time.Microsecond
			}
			if len(results) > 0 {
				e.SlotUse = rig.Round3(busy.Seconds() / (float64(cfg.slots()) * o.Makespan.Seconds()))
				e.MapMeanMs = rig.Round3(1000 * busy.Seconds() / float64(len(results)))
			}
			e.TimerRef, e.PreciseRef = rig.SleepRefs(ctx, d, cfg.slots(), shards)
			r.log.Logf("efficiency: %d × %v over %d slots: makespan %.2fs, ideal %.2fs, ratio %.3f (slots %.1f%% in map steps, mean map %.3f ms; a bare loop: %.3f with a time.Timer, %.3f with the precise sleep)",
				shards, d, cfg.slots(), e.MakespanS, e.IdealS, e.Ratio, 100*e.SlotUse, e.MapMeanMs, e.TimerRef, e.PreciseRef)
		}
		r.rep.Efficiency = append(r.rep.Efficiency, e)
	}
	return nil
}
