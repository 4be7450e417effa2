package report

import "testing"

// TestLoad_SummarizeFailover: runs are grouped by kind, and only SIGKILL runs are held to the
// in-flight bound (a SIGTERMed process hands shards back until it is done).
func TestLoad_SummarizeFailover(t *testing.T) {
	kill := func(sig string, toLeader float64) Kill {
		return Kill{Signal: sig, Leader: true, NewLeader: "w2", ToLeaderS: toLeader, MergeSeen: true, ToMergeS: toLeader + 0.1}
	}
	l := &Load{Settings: LoadSettings{InFlightBound: 5}}
	l.SummarizeFailover([]FailoverRun{
		{Kind: KindCrash, Kills: []Kill{kill("SIGKILL", 0.2)}, Redelivered: 5, Redone: 5, Exact: true, MakespanS: 3, TimeLostS: 1},
		{Kind: KindCrash, Kills: []Kill{kill("SIGKILL", 0.4)}, Redelivered: 6, Redone: 6, CompletedRerun: 1, Exact: true},
		{Kind: KindGraceful, Kills: []Kill{kill("SIGTERM", 0.03)}, Redelivered: 50, Redone: 50, Exact: true},
		{Kind: KindWorkerCrash, Kills: []Kill{{Signal: "SIGKILL"}}, Redone: 2, MakespanS: 4, TimeLostS: 0.5},
	})
	if l.RedoneOverBound != 1 {
		t.Errorf("RedoneOverBound = %d, want 1 (the second crash run; the SIGTERM run is not held to it)", l.RedoneOverBound)
	}
	if l.RedoneShards != 63 || l.CompletedRerun != 1 {
		t.Errorf("RedoneShards %d, CompletedRerun %d, want 63 and 1", l.RedoneShards, l.CompletedRerun)
	}
	c := l.Failover.Crash
	if c == nil || c.ToLeader.N != 2 || c.MaxS != 0.4 || c.ToFirstMerge.N != 2 || c.TimeLost.N != 1 {
		t.Errorf("crash summary %+v", c)
	}
	if g := l.Failover.Graceful; g == nil || g.ToLeader.N != 1 {
		t.Errorf("graceful summary %+v", g)
	}
	if w := l.WorkerCrash; w == nil || w.TimeLost.N != 1 || w.Redone.N != 1 {
		t.Errorf("worker crash summary %+v", w)
	}
}
