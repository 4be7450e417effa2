package report

import (
	"fmt"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Target is one of the targets with the measured value.
type Target struct {
	Name   string  `json:"name"`
	Want   string  `json:"want"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Met    bool    `json:"met"`
	Judged bool    `json:"judged"` // false in --quick runs (correctness only) or when not measured
	Note   string  `json:"note,omitempty"`
}

// Targets collects judged targets.
type Targets []Target

// Add appends a target.
func (ts *Targets) Add(name, want string, value float64, unit string, met, judged bool, note string) {
	*ts = append(*ts, Target{Name: name, Want: want, Value: value, Unit: unit, Met: met, Judged: judged, Note: note})
}

// Judge judges the targets of issues 11 (failover), 12 (throughput, memory, stragglers) and 13
// (a NATS cluster); more adds the command's own before the correctness totals. A quick run
// judges only correctness.
func (rep *Load) Judge(quick bool, more func(*Targets)) []Target {
	var ts Targets
	speed := !quick
	add := ts.Add
	if tp := rep.Throughput; tp != nil {
		add("throughput at default settings ÷ bare JetStream round trip batched as the dispatcher does", "≥ 1.0", tp.Ratio, "×", tp.Ratio >= 1.0, speed && tp.BaselinePerS > 0,
			fmt.Sprintf("%d shards a message; ÷ the one-message-per-shard loop: %s×", tp.ShardsPerMsg, rig.Num(tp.UnbatchedRatio)))
		add("CPU per no-op shard, all processes but Azurite", "≤ 80 µs", tp.CPUMicrosPerShard, " µs", tp.CPUMicrosPerShard > 0 && tp.CPUMicrosPerShard <= 80,
			speed && tp.CPUMicrosPerShard > 0, "")
	}
	for _, e := range rep.Efficiency {
		want := 0.85
		if e.ShardS >= 0.005 {
			want = 0.92
		}
		add(fmt.Sprintf("efficiency at %.0f ms shards (ideal ÷ makespan)", 1000*e.ShardS), fmt.Sprintf("≥ %.2f", want), e.Ratio, "",
			e.Ratio >= want, speed && e.MakespanS > 0, "")
	}
	if sj := rep.SmallJob; sj != nil {
		add("primes below 2·10^7, 200 shards: submit→finished median", "≤ 0.05 s", sj.MedianS, " s", sj.Makespan.N > 0 && sj.MedianS <= 0.05, speed && sj.Makespan.N > 0, "idle cluster")
	}
	if wc := rep.Wordcount; wc != nil {
		add("wordcount shards/s, 200k-word ÷ 1k-word vocabulary", "≥ 0.9", wc.Ratio, "×", wc.Ratio >= 0.9, speed && wc.Ratio > 0, "")
	}
	if st := rep.Straggler; st != nil {
		add("one worker 10× slower: makespan ÷ no-straggler makespan", "≤ 1.2, exact", st.Ratio, "×", st.Ratio > 0 && st.Ratio <= 1.2 && st.Exact, speed && st.Ratio > 0,
			fmt.Sprintf("%d workers; capacity bound %s×", st.Workers, rig.Num(st.Bound)))
		if sm := st.Small; sm != nil {
			add(fmt.Sprintf("the same on %d workers (not judged: its capacity bound alone is %s×)", sm.Workers, rig.Num(sm.Bound)), "reported", sm.Ratio, "×",
				sm.Exact, false, fmt.Sprintf("%s s beyond the bound", rig.Num(sm.TailS)))
		}
	}
	if c := rep.Failover.Crash; c != nil {
		// Issue 21: the probe path confirms a crashed process in milliseconds.
		add("crash takeover p90: kill → new leader elected", "≤ 0.3 s", c.ToLeader.P90, " s", c.ToLeader.N > 0 && c.ToLeader.P90 <= 0.3, speed && c.ToLeader.N > 0, "")
		add("crash takeover p90: kill → its first merge", "≤ 0.4 s", c.ToFirstMerge.P90, " s", c.ToFirstMerge.N > 0 && c.ToFirstMerge.P90 <= 0.4, speed && c.ToFirstMerge.N > 0, "")
	}
	if g := rep.Failover.Graceful; g != nil {
		add("graceful handover p90 (to new leader)", "≤ 50 ms", g.ToLeader.P90, " s", g.ToLeader.N > 0 && g.ToLeader.P90 <= 0.05, speed && g.ToLeader.N > 0, "")
	}
	if w := rep.WorkerCrash; w != nil {
		add("follower SIGKILL: makespan lost p90", "≤ 3 s", w.TimeLost.P90, " s", w.TimeLost.N > 0 && w.TimeLost.P90 <= 3, speed && w.TimeLost.N > 0, "makespan − no-kill makespan")
	}
	if m := rep.Million; m != nil {
		add(fmt.Sprintf("%d-shard job: leader RSS max", m.Shards), "≤ 64 MiB", m.MaxLeaderRSSMiB, " MiB", m.RSSSamples > 0 && m.MaxLeaderRSSMiB <= 64, speed && m.RSSSamples > 0, "every leader of the job, sampled every 100 ms")
		// A message carries up to a few shards, so a backlog of messages within the window in
		// shards is bounded by it.
		add(fmt.Sprintf("%d-shard job: shard stream backlog max (messages)", m.Shards), fmt.Sprintf("≤ window (%d)", m.Window), float64(m.MaxBacklog), "",
			m.MaxBacklog <= uint64(m.Window), speed && len(m.Samples) > 0, "")
		note := fmt.Sprintf("leader killed at %d merged", m.KilledAt)
		if !m.Killed {
			note = "the job ended before 50 % was seen: no kill"
		}
		add(fmt.Sprintf("%d-shard job, leader killed at 50 %%: exact (1 = yes)", m.Shards), "1", b2f(m.Exact), "", m.Exact && m.Killed, true, note)
	}
	if l := rep.Loaded; l != nil {
		add(fmt.Sprintf("takeovers of a live leader, loaded no-fault run (%.0f s, CPU %.0f%% busy)", l.DurationS, 100*l.CPUBusy), "0",
			float64(l.Elections+l.BrokeLeases), "", l.Elections == 0 && l.BrokeLeases == 0, true, "new terms + broke_lease events")
	}
	if o := rep.Outage; o != nil {
		add(fmt.Sprintf("leader changes during a %.0f s NATS outage", o.DownS), "≤ 1", float64(o.LeaderChanges), "", o.LeaderChanges <= 1 && o.DownS > 0, o.DownS > 0, "")
	}
	if n := rep.NATSCluster; n != nil {
		add("3-node NATS cluster (R3), a node killed mid-job: exact (1 = yes)", "1", b2f(n.Exact), "", n.Exact && n.DownS > 0, true, fmt.Sprintf("%.2f s lost", n.TimeLostS))
	}
	if more != nil {
		more(&ts)
	}
	add("wrong results", "0", float64(rep.WrongResults), "", rep.WrongResults == 0, true, "")
	add("lost jobs", "0", float64(rep.LostJobs), "", rep.LostJobs == 0, true, "")
	if rep.Failover.Crash != nil || rep.Failover.Graceful != nil || rep.WorkerCrash != nil {
		add("completed shards re-run after a kill", "0", float64(rep.CompletedRerun), "", rep.CompletedRerun == 0, speed,
			"only shards in flight on the killed process may run twice")
		add("SIGKILL runs with more shards redone than the victims held", "0", float64(rep.RedoneOverBound), "", rep.RedoneOverBound == 0, speed,
			fmt.Sprintf("a process holds ≤ %d: 2 × concurrency + 1", rep.Settings.InFlightBound))
	}
	return ts
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Correct reports whether the run produced only exact results and lost no job.
func (rep *Load) Correct() bool { return rep.WrongResults == 0 && rep.LostJobs == 0 }

// Missed lists the judged targets that were not met.
func (rep *Load) Missed() []Target {
	var out []Target
	for _, t := range rep.Targets {
		if t.Judged && !t.Met {
			out = append(out, t)
		}
	}
	return out
}
