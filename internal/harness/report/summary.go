package report

import (
	"fmt"
	"io"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Sections are the parts of the load test's summary that its command writes itself.
type Sections struct {
	AfterTotals func(io.Writer)                  // after the targets and correctness totals
	Figures     func(row func(string, rig.Dist)) // rows of the figures table, after wordcount
	Notes       []string                         // after the notes on failover and throughput
	AfterNotes  func(io.Writer)                  // after the notes
}

// WriteMarkdown writes the human summary of rep: targets, correctness, p50/p90/max of every
// figure, then the individual runs. x adds the command's own sections.
func (rep *Load) WriteMarkdown(w io.Writer, x Sections) {
	m := rig.Markdown{W: w}
	p := m.P
	s := rep.Settings
	kind := "benchmark"
	if rep.Quick {
		kind = "quick run (correctness only)"
	}
	p("# Load test: %s", kind)
	m.Para("%s, %d CPUs, %s. %d workers per cluster; concurrency %d (throughput: %d); lease %.0f s; shard timeout %.0f s; "+
		"failover jobs of %d shards with %.0f ms map delay on %d clusters side by side. Seed %d; took %.0f s.",
		rep.StartedAt.Format("2006-01-02 15:04 UTC"), rep.Machine.CPUs, rep.Machine.Go, s.Workers, s.Concurrency,
		s.ThroughputConcurrency, s.LeaseS, s.ShardTimeoutS, s.FailoverShards, 1000*s.MapDelayS, s.Parallel, rep.Seed, rep.DurationS)
	if rep.Incomplete != "" {
		m.Para("**Incomplete:** %s", rep.Incomplete)
	}
	m.Section("Targets")
	m.Table("target", "want", "measured", "verdict")
	for _, t := range rep.Targets {
		verdict := "met"
		switch {
		case !t.Judged:
			verdict = "not judged"
		case !t.Met:
			verdict = "**MISSED**"
		}
		note := ""
		if t.Note != "" {
			note = " (" + t.Note + ")"
		}
		p("| %s%s | %s | %s | %s |", t.Name, note, t.Want, rig.Num(t.Value)+t.Unit, verdict)
	}
	m.Para("Jobs submitted: %d. Wrong results: %d. Lost jobs: %d. Shards run more than once (all failover runs): %d; "+
		"of them completed by a surviving process and re-run: %d.", rep.Jobs, rep.WrongResults, rep.LostJobs, rep.RedoneShards, rep.CompletedRerun)
	call(x.AfterTotals, w)

	m.Section("Figures")
	m.Table("figure", "n", "p50", "p90", "max")
	row := m.Figure
	if tp := rep.Throughput; tp != nil {
		row(fmt.Sprintf("throughput, shards/s end to end (%d shards)", tp.Shards), tp.PerS)
		var b, u []float64
		for _, x := range tp.Baseline {
			if x.ShardsPerMsg > 1 {
				b = append(b, x.PerS)
			} else {
				u = append(u, x.PerS)
			}
		}
		row(fmt.Sprintf("baseline JetStream round trip batched as the dispatcher does (%d shards a message), shards/s", tp.ShardsPerMsg), rig.Summarize(b))
		row("baseline JetStream round trip, one message per shard, shards/s", rig.Summarize(u))
		row("throughput ratio ÷ the batched baseline (best ÷ best)", rig.Single(tp.Ratio, tp.BaselinePerS > 0))
		row("throughput ratio ÷ the one-message-per-shard baseline (best ÷ best)", rig.Single(tp.UnbatchedRatio, tp.UnbatchedPerS > 0))
		row("CPU µs per shard, all processes but Azurite (best run)", rig.Single(tp.CPUMicrosPerShard, tp.CPUMicrosPerShard > 0))
		row("CPU µs per shard of Azurite (best run)", rig.Single(tp.StorageCPUMicrosPerShard, tp.StorageCPUMicrosPerShard > 0))
	}
	for _, e := range rep.Efficiency {
		row(fmt.Sprintf("efficiency, ideal ÷ makespan (%d × %.0f ms over %d slots)", e.Shards, 1000*e.ShardS, e.Slots), rig.Single(e.Ratio, e.MakespanS > 0))
		row(fmt.Sprintf("efficiency %.0f ms, makespan s (ideal %s s)", 1000*e.ShardS, rig.Num(e.IdealS)), rig.Single(e.MakespanS, e.MakespanS > 0))
		row(fmt.Sprintf("efficiency %.0f ms: slots' time in map steps ÷ (slots × makespan)", 1000*e.ShardS), rig.Single(e.SlotUse, e.SlotUse > 0))
		row(fmt.Sprintf("efficiency %.0f ms: mean map time measured by the workers, ms", 1000*e.ShardS), rig.Single(e.MapMeanMs, e.MapMeanMs > 0))
		row(fmt.Sprintf("efficiency %.0f ms: a bare loop of %d goroutines, ideal ÷ makespan, time.Timer sleep", 1000*e.ShardS, e.Slots), rig.Single(e.TimerRef, e.TimerRef > 0))
		row(fmt.Sprintf("efficiency %.0f ms: the same loop with the precise sleep the sleep job uses", 1000*e.ShardS), rig.Single(e.PreciseRef, e.PreciseRef > 0))
	}
	if sj := rep.SmallJob; sj != nil {
		row("small job (primes < 2·10^7, 200 shards): submit→finished s", sj.Makespan)
		row("small job: submit→planned s", sj.Planned)
	}
	if wc := rep.Wordcount; wc != nil {
		for _, vocab := range []int{1_000, 200_000} {
			var xs []float64
			for _, j := range wc.Jobs {
				if j.Vocabulary == vocab && j.PerS > 0 {
					xs = append(xs, j.PerS)
				}
			}
			row(fmt.Sprintf("wordcount, %d-word vocabulary (%d shards): shards/s (the best counts)", vocab, wc.Shards), rig.Summarize(xs))
		}
	}
	if x.Figures != nil {
		x.Figures(row)
	}
	if st := rep.Straggler; st != nil {
		for _, x := range []*StragglerRun{&st.StragglerRun, st.Small} {
			if x == nil {
				continue
			}
			pre := fmt.Sprintf("straggler, %d workers", x.Workers)
			row(fmt.Sprintf("%s (%d shards, %.0f ms map delay, one worker %.0f ms): makespan s", pre, x.Shards, 1000*x.DelayS, 1000*x.StragglerS), x.Makespan)
			row(pre+": no-straggler makespan s", x.Reference)
			row(pre+": makespan ÷ no-straggler makespan (best ÷ best)", rig.Single(x.Ratio, x.Ratio > 0))
			row(fmt.Sprintf("%s: capacity bound of that ratio, %d ÷ (%d − 0.9)", pre, x.Workers, x.Workers), rig.Single(x.Bound, x.Ratio > 0))
			row(pre+": s beyond the bound (best − best no-straggler × bound)", rig.Single(x.TailS, x.Ratio > 0))
			row(pre+": s the last 1 % of shards took", x.LastPercent)
			row(pre+": s the last 1 % of shards took without the straggler", x.ReferenceLastPercent)
			row(pre+": shards backed up per job", x.Backups)
			row(pre+": shards backed up per job without the straggler", x.ReferenceBackups)
			row(pre+": duplicate results per job", x.Duplicates)
		}
	}
	if m := rep.Million; m != nil {
		row(fmt.Sprintf("big job (%d shards, leader killed at 50 %%): makespan s", m.Shards), rig.Single(m.MakespanS, m.MakespanS > 0))
		row("big job: leader RSS MiB (max of every sample)", rig.Single(m.MaxLeaderRSSMiB, m.RSSSamples > 0))
		row("big job: shard stream backlog, messages (max)", rig.Single(float64(m.MaxBacklog), len(m.Samples) > 0))
		row("big job: s from the leader's kill to a new leader", rig.Single(m.ToLeaderS, m.Killed))
	}
	if o := rep.Outage; o != nil {
		row("NATS outage: s the NATS server process was down", rig.Single(o.DownS, o.DownS > 0))
		row("NATS outage: leader changes", rig.Single(float64(o.LeaderChanges), o.DownS > 0))
		row("NATS outage: s lost beyond the outage (makespan − reference − down)", rig.Single(o.TimeLostS, o.MakespanS > 0 && o.ReferenceS > 0))
	}
	if n := rep.NATSCluster; n != nil {
		row("3-node NATS cluster: s a node was down", rig.Single(n.DownS, n.DownS > 0))
		row("3-node NATS cluster: s lost (makespan − reference)", rig.Single(n.TimeLostS, n.MakespanS > 0 && n.ReferenceS > 0))
		row("3-node NATS cluster: leader changes", rig.Single(float64(n.LeaderChanges), n.DownS > 0))
	}
	if l := rep.Loaded; l != nil {
		row(fmt.Sprintf("loaded no-fault run (%d pi jobs, CPU %.0f%% busy): leader changes", l.Jobs, 100*l.CPUBusy), rig.Single(float64(l.Elections), true))
		row("loaded no-fault run: lease breaks", rig.Single(float64(l.BrokeLeases), true))
		row("loaded no-fault run: suspicions (missed heartbeats, no break)", rig.Single(float64(l.Suspected), true))
	}
	for _, lf := range []struct {
		name string
		f    *LeaderFailover
	}{{"crash (SIGKILL leader)", rep.Failover.Crash}, {"graceful (SIGTERM leader)", rep.Failover.Graceful}} {
		if lf.f == nil {
			continue
		}
		row(lf.name+": s to a new leader", lf.f.ToLeader)
		if lf.f == rep.Failover.Graceful {
			row(lf.name+": s from the signal to the process's exit", lf.f.Exit)
		}
		row(lf.name+": s to its first merged result", lf.f.ToFirstMerge)
		row(lf.name+": shards run more than once per run", lf.f.Redone)
		row(lf.name+": duplicate results dropped per run", lf.f.Duplicates)
		row(lf.name+": s lost per run (makespan − no-kill makespan)", lf.f.TimeLost)
	}
	if wc := rep.WorkerCrash; wc != nil {
		row("worker crash (SIGKILL follower): s lost per run", wc.TimeLost)
		row("worker crash: shards run more than once per run", wc.Redone)
	}

	if tp := rep.Throughput; tp != nil {
		m.Section("Throughput")
		m.Table("run", "shards/s", "seconds", "planned after s", "duplicates")
		for i, r := range tp.Runs {
			p("| system %d (%s) | %s | %s | %s | %d |", i+1, r.Job, rig.Num(r.PerS), rig.Num(r.SecondsE2E), rig.Num(r.PlannedS), r.Duplicates)
		}
		for _, b := range tp.Baseline {
			p("| baseline, %d workers × prefetch %d, shards a message %d | %s | %s | – | – |", b.Workers, b.Prefetch, max(b.ShardsPerMsg, 1), rig.Num(b.PerS), rig.Num(b.Seconds))
		}
	}

	var runs []FailoverRun
	if c := rep.Failover.Crash; c != nil {
		runs = append(runs, c.Runs...)
	}
	if g := rep.Failover.Graceful; g != nil {
		runs = append(runs, g.Runs...)
	}
	if wc := rep.WorkerCrash; wc != nil {
		runs = append(runs, wc.Runs...)
	}
	if len(runs) > 0 {
		m.Section("Failover runs")
		m.Table("run", "job", "kill at", "kills (signal worker @ merged → new leader: s to leader / s to first merge)", "makespan s (ref)", "redone", "dups", "result")
		for _, r := range runs {
			p("| %s %d (%s) | %s | %.0f%% | %s | %s (%s) | %d | %d | %s |", r.Kind, r.N, r.Cluster, r.JobType, 100*r.KillAt,
				killsText(r), rig.Num(r.MakespanS), rig.Num(r.ReferenceS), r.Redone, r.Duplicates, resultText(r))
		}
	}
	m.List("Notes", append(notes(rep), x.Notes...))
	call(x.AfterNotes, w)
	if rep.Plot != "" {
		m.Para("Timeline plot: %s", rep.Plot)
	}
	m.List("Errors", rep.Errors)
}

// killsText lists a run's kills: signal worker @merged → new leader: s to leader / s to first
// merge.
func killsText(r FailoverRun) string {
	var ks []string
	for _, k := range r.Kills {
		x := fmt.Sprintf("%s %s @%d", k.Signal, k.Worker, k.Done)
		if k.Leader {
			x += fmt.Sprintf(" → %s: %s / ", k.NewLeader, rig.Num(k.ToLeaderS))
			if k.MergeSeen {
				x += rig.Num(k.ToMergeS)
			} else {
				x += "–"
			}
		}
		ks = append(ks, x)
	}
	if r.Skipped != "" {
		ks = append(ks, "none: "+r.Skipped)
	}
	return strings.Join(ks, "; ")
}

// resultText is a run's outcome: exact, lost or wrong, and completed shards re-run.
func resultText(r FailoverRun) string {
	res := "exact"
	switch {
	case r.Lost:
		res = "**LOST**"
	case !r.Exact:
		res = "**WRONG**: " + r.Error
	}
	if r.CompletedRerun > 0 {
		res += fmt.Sprintf(", **%d completed shards re-run**", r.CompletedRerun)
	}
	return res
}

// notes explains the figures from the settings that shape them.
func notes(rep *Load) []string {
	s := rep.Settings
	var out []string
	if c := rep.Failover.Crash; c != nil && c.ToLeader.N > 0 {
		out = append(out, fmt.Sprintf("After a leader crash the followers stop hearing its heartbeats; after the suspicion "+
			"timeout one breaks the %.0f s lease with a fenced conditional break and is elected, without waiting for the lease "+
			"to expire. Measured kill → elected: %s–%s s. Meanwhile the workers go on with the queued shards, so the new "+
			"leader merges a backlog at once (first merge p50 %s s after the kill).",
			s.LeaseS, rig.Num(c.ToLeader.Min), rig.Num(c.ToLeader.Max), rig.Num(c.ToFirstMerge.P50)))
	}
	if g := rep.Failover.Graceful; g != nil && g.TimeLost.N > 0 && g.TimeLost.P50 >= 0.5*s.ShardTimeoutS {
		early, late := 0, 0
		for _, r := range g.Runs {
			for _, x := range r.RerunAfterS {
				if x < s.ShardTimeoutS/2 {
					early++
				} else {
					late++
				}
			}
		}
		out = append(out, fmt.Sprintf("A graceful stop hands the lease over in %s s (p50), yet its job finishes %s s later than without "+
			"the stop (p50), about one shard timeout (%.0f s). Of the shards re-run after a SIGTERM, %d came back at once (handed "+
			"back by the stopping worker) and %d only after the shard timeout: shards the stopping worker had prefetched are not "+
			"handed back and wait out their AckWait. With the default shard timeout (30 s) a rolling restart stalls jobs 30 s.",
			rig.Num(g.ToLeader.P50), rig.Num(g.TimeLost.P50), s.ShardTimeoutS, early, late))
	}
	if w := rep.WorkerCrash; w != nil && w.TimeLost.N > 0 {
		out = append(out, fmt.Sprintf("A SIGKILLed worker's shards are run again by the others (at the latest after the shard "+
			"timeout, %.0f s): time lost p50 %s s, p90 %s s.", s.ShardTimeoutS, rig.Num(w.TimeLost.P50), rig.Num(w.TimeLost.P90)))
	}
	if tp := rep.Throughput; tp != nil && tp.BaselinePerS > 0 {
		out = append(out, fmt.Sprintf("Throughput runs every process (%d workers, NATS, Azurite, the baseline) on the same %d CPUs; "+
			"the system's best of %d runs against the baseline's best of %d. Worker concurrency %s; a worker holds more "+
			"shards than it has slots while shards are short, so zero-duration shards keep its slots busy.",
			s.Workers, rep.Machine.CPUs, len(tp.Runs), len(tp.Baseline), concurrencyText(tp.Concurrency)))
	}
	return out
}

func concurrencyText(n int) string {
	if n == 0 {
		return "at the worker default"
	}
	return fmt.Sprint(n)
}

func call(f func(io.Writer), w io.Writer) {
	if f != nil {
		f(w)
	}
}
