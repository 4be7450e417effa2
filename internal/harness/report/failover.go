package report

import (
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// NewKill is the report's account of the signal rk sent, done shards merged, start the submit.
func NewKill(rk rig.Kill, start time.Time, done int) Kill {
	return Kill{Sent: rk.At, AtS: rig.Round3(rk.At.Sub(start).Seconds()), Worker: rk.Worker, Signal: rig.SigName(rk.Signal), Done: done,
		ExitS: rig.Round3(rk.Exited.Sub(rk.At).Seconds())}
}

// SummarizeFailover fills the failover sections from the runs.
func (l *Load) SummarizeFailover(runs []FailoverRun) {
	bound := l.Settings.InFlightBound
	byKind := map[string][]FailoverRun{}
	for _, run := range runs {
		byKind[run.Kind] = append(byKind[run.Kind], run)
		l.RedoneShards += run.Redone
		l.CompletedRerun += run.CompletedRerun
		// The bound holds for SIGKILL: a killed process holds at most that many shards. A process
		// stopped with SIGTERM goes on taking shards (and handing them back) until it is done.
		if killedOnly(run) && run.Redelivered > bound*len(run.Kills) {
			l.RedoneOverBound++
		}
	}
	l.Failover.Crash = leaderFailover(byKind[KindCrash])
	l.Failover.Graceful = leaderFailover(byKind[KindGraceful])
	if wr := byKind[KindWorkerCrash]; len(wr) > 0 {
		var lost, redone []float64
		for _, run := range wr {
			if run.MakespanS > 0 {
				lost = append(lost, run.TimeLostS)
			}
			redone = append(redone, float64(run.Redone))
		}
		l.WorkerCrash = &WorkerCrash{TimeLost: rig.Summarize(lost), Redone: rig.Summarize(redone), Runs: wr}
	}
}

// leaderFailover summarizes runs that kill or stop the leader; nil when there are none.
func leaderFailover(runs []FailoverRun) *LeaderFailover {
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

// killedOnly reports whether every signal of run was SIGKILL (and there was one).
func killedOnly(run FailoverRun) bool {
	for _, k := range run.Kills {
		if k.Signal != "SIGKILL" {
			return false
		}
	}
	return len(run.Kills) > 0
}

// Summary is the one-line account of a run for the progress display.
func (r FailoverRun) Summary() string {
	return fmt.Sprintf("%s run %d [%s, %s]: %s; %s in %.2fs (ref %.2fs); redone %d, duplicates %d", r.Kind, r.N, r.Cluster, r.JobType,
		killsText(r), resultText(r), r.MakespanS, r.ReferenceS, r.Redone, r.Duplicates)
}
