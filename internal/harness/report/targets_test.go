package report

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// The issues' thresholds, judged at their edges.
func TestTargets_Thresholds(t *testing.T) {
	judge := func(rep *Load, name string) Target {
		t.Helper()
		for _, x := range rep.Judge(false, nil) {
			if strings.HasPrefix(x.Name, name) {
				return x
			}
		}
		t.Fatalf("no target %q", name)
		return Target{}
	}
	for _, c := range []struct {
		name   string
		rep    *Load
		target string
		met    bool
	}{
		{"takeover 0.3 s", &Load{Failover: Failover{Crash: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.3}}}}, "crash takeover p90: kill → new leader", true},
		{"takeover 0.31 s", &Load{Failover: Failover{Crash: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.31}}}}, "crash takeover p90: kill → new leader", false},
		{"first merge 0.4 s", &Load{Failover: Failover{Crash: &LeaderFailover{ToFirstMerge: rig.Dist{N: 5, P90: 0.4}}}}, "crash takeover p90: kill → its first merge", true},
		{"first merge 0.41 s", &Load{Failover: Failover{Crash: &LeaderFailover{ToFirstMerge: rig.Dist{N: 5, P90: 0.41}}}}, "crash takeover p90: kill → its first merge", false},
		{"graceful 40 ms", &Load{Failover: Failover{Graceful: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.04}}}}, "graceful handover", true},
		{"graceful 60 ms", &Load{Failover: Failover{Graceful: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.06}}}}, "graceful handover", false},
		{"follower 3 s", &Load{WorkerCrash: &WorkerCrash{TimeLost: rig.Dist{N: 3, P90: 3}}}, "follower SIGKILL", true},
		{"follower 3.5 s", &Load{WorkerCrash: &WorkerCrash{TimeLost: rig.Dist{N: 3, P90: 3.5}}}, "follower SIGKILL", false},
		{"outage, one change", &Load{Outage: &Outage{ServerFault: ServerFault{DownS: 30, LeaderChanges: 1}}}, "leader changes during", true},
		{"outage, two changes", &Load{Outage: &Outage{ServerFault: ServerFault{DownS: 30, LeaderChanges: 2}}}, "leader changes during", false},
		{"loaded, a lease break", &Load{Loaded: &Loaded{DurationS: 600, BrokeLeases: 1}}, "takeovers of a live leader", false},
		{"throughput 0.99", &Load{Throughput: &Throughput{Ratio: 0.99, BaselinePerS: 1}}, "throughput at default", false},
		{"cpu 80 µs", &Load{Throughput: &Throughput{CPUMicrosPerShard: 80, BaselinePerS: 1}}, "CPU per no-op shard", true},
		{"efficiency 2 ms at 0.85", &Load{Efficiency: []Efficiency{{ShardS: 0.002, Ratio: 0.85, MakespanS: 1}}}, "efficiency at 2 ms", true},
		{"efficiency 5 ms at 0.91", &Load{Efficiency: []Efficiency{{ShardS: 0.005, Ratio: 0.91, MakespanS: 1}}}, "efficiency at 5 ms", false},
		{"small job 50 ms", &Load{SmallJob: &SmallJob{MedianS: 0.05, Makespan: rig.Dist{N: 1, P50: 0.05}}}, "primes below", true},
		{"wordcount 0.89", &Load{Wordcount: &Wordcount{Ratio: 0.89}}, "wordcount", false},
		{"straggler 1.2", &Load{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.2, Exact: true}}}, "one worker 10×", true},
		{"straggler 1.21", &Load{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.21, Exact: true}}}, "one worker 10×", false},
		{"straggler inexact", &Load{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.1}}}, "one worker 10×", false},
		{"big job 65 MiB", &Load{Million: &Million{Shards: 1_000_000, MaxLeaderRSSMiB: 65, RSSSamples: 10}}, "1000000-shard job: leader RSS", false},
		{"big job not killed", &Load{Million: &Million{Shards: 1_000_000, Exact: true}}, "1000000-shard job, leader killed", false},
		{"nats cluster exact", &Load{NATSCluster: &NATSCluster{ServerFault: ServerFault{Exact: true, DownS: 10}}}, "3-node NATS cluster", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.rep, c.target); got.Met != c.met {
				t.Errorf("%s: met %v, want %v (%+v)", c.target, got.Met, c.met, got)
			}
		})
	}
}
