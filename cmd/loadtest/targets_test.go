package main

import (
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

func TestParseDurations(t *testing.T) {
	got, err := parseDurations(" 2ms, 5ms,")
	if err != nil || len(got) != 2 || got[0] != 2*time.Millisecond || got[1] != 5*time.Millisecond {
		t.Fatalf("parseDurations = %v, %v", got, err)
	}
	for _, bad := range []string{"2", "x", "-1ms", "0s"} {
		if _, err := parseDurations(bad); err == nil || !strings.Contains(err.Error(), "positive duration") {
			t.Errorf("parseDurations(%q) = %v, want a clear error", bad, err)
		}
	}
}

func TestValidate_NewScenarioSettings(t *testing.T) {
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no efficiency duration", func(c *Config) { c.EfficiencyDurations = nil }, "efficiency"},
		{"outage too long", func(c *Config) { c.OutageDuration = time.Hour }, "outage duration"},
		{"loaded too short", func(c *Config) { c.LoadedDuration = time.Millisecond }, "loaded duration"},
		{"million too big", func(c *Config) { c.MillionShards = 2_000_000 }, "million"},
		{"wordcount tiny shards", func(c *Config) { c.WordcountShardBytes = 10 }, "wordcount"},
		{"straggler without delay", func(c *Config) { c.StragglerDelay = 0 }, "straggler"},
		{"straggler on one worker", func(c *Config) { c.StragglerWorkers = 1 }, "straggler workers"},
		{"straggler small job tiny", func(c *Config) { c.StragglerSmallShards = 5 }, "straggler small shards"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := DefaultConfig()
			c.mod(&cfg)
			if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Validate = %v, want an error about %q", err, c.want)
			}
		})
	}
	if cfg := DefaultConfig(); cfg.Validate() != nil {
		t.Fatalf("default config invalid: %v", cfg.Validate())
	}
}

// The issues' thresholds, judged at their edges.
func TestTargets_Thresholds(t *testing.T) {
	cfg := DefaultConfig()
	judge := func(rep *Report, name string) Target {
		t.Helper()
		for _, x := range targets(&cfg, rep) {
			if strings.HasPrefix(x.Name, name) {
				return x
			}
		}
		t.Fatalf("no target %q", name)
		return Target{}
	}
	for _, c := range []struct {
		name   string
		rep    *Report
		target string
		met    bool
	}{
		{"takeover 0.3 s", &Report{Failover: Failover{Crash: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.3}}}}, "crash takeover p90: kill → new leader", true},
		{"takeover 0.31 s", &Report{Failover: Failover{Crash: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.31}}}}, "crash takeover p90: kill → new leader", false},
		{"first merge 0.4 s", &Report{Failover: Failover{Crash: &LeaderFailover{ToFirstMerge: rig.Dist{N: 5, P90: 0.4}}}}, "crash takeover p90: kill → its first merge", true},
		{"first merge 0.41 s", &Report{Failover: Failover{Crash: &LeaderFailover{ToFirstMerge: rig.Dist{N: 5, P90: 0.41}}}}, "crash takeover p90: kill → its first merge", false},
		{"graceful 40 ms", &Report{Failover: Failover{Graceful: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.04}}}}, "graceful handover", true},
		{"graceful 60 ms", &Report{Failover: Failover{Graceful: &LeaderFailover{ToLeader: rig.Dist{N: 5, P90: 0.06}}}}, "graceful handover", false},
		{"follower 3 s", &Report{WorkerCrash: &WorkerCrash{TimeLost: rig.Dist{N: 3, P90: 3}}}, "follower SIGKILL", true},
		{"follower 3.5 s", &Report{WorkerCrash: &WorkerCrash{TimeLost: rig.Dist{N: 3, P90: 3.5}}}, "follower SIGKILL", false},
		{"outage, one change", &Report{Outage: &Outage{ServerFault: ServerFault{DownS: 30, LeaderChanges: 1}}}, "leader changes during", true},
		{"outage, two changes", &Report{Outage: &Outage{ServerFault: ServerFault{DownS: 30, LeaderChanges: 2}}}, "leader changes during", false},
		{"loaded, a lease break", &Report{Loaded: &Loaded{DurationS: 600, BrokeLeases: 1}}, "takeovers of a live leader", false},
		{"throughput 0.99", &Report{Throughput: &Throughput{Ratio: 0.99, BaselinePerS: 1}}, "throughput at default", false},
		{"cpu 80 µs", &Report{Throughput: &Throughput{CPUMicrosPerShard: 80, BaselinePerS: 1}}, "CPU per no-op shard", true},
		{"efficiency 2 ms at 0.85", &Report{Efficiency: []Efficiency{{ShardS: 0.002, Ratio: 0.85, MakespanS: 1}}}, "efficiency at 2 ms", true},
		{"efficiency 5 ms at 0.91", &Report{Efficiency: []Efficiency{{ShardS: 0.005, Ratio: 0.91, MakespanS: 1}}}, "efficiency at 5 ms", false},
		{"small job 50 ms", &Report{SmallJob: &SmallJob{MedianS: 0.05, Makespan: rig.Dist{N: 1, P50: 0.05}}}, "primes below", true},
		{"wordcount 0.89", &Report{Wordcount: &Wordcount{Ratio: 0.89}}, "wordcount", false},
		{"straggler 1.2", &Report{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.2, Exact: true}}}, "one worker 10×", true},
		{"straggler 1.21", &Report{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.21, Exact: true}}}, "one worker 10×", false},
		{"straggler inexact", &Report{Straggler: &Straggler{StragglerRun: StragglerRun{Ratio: 1.1}}}, "one worker 10×", false},
		{"big job 65 MiB", &Report{Million: &Million{Shards: 1_000_000, MaxLeaderRSSMiB: 65, RSSSamples: 10}}, "1000000-shard job: leader RSS", false},
		{"big job not killed", &Report{Million: &Million{Shards: 1_000_000, Exact: true}}, "1000000-shard job, leader killed", false},
		{"nats cluster exact", &Report{NATSCluster: &NATSCluster{ServerFault: ServerFault{Exact: true, DownS: 10}}}, "3-node NATS cluster", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := judge(c.rep, c.target); got.Met != c.met {
				t.Errorf("%s: met %v, want %v (%+v)", c.target, got.Met, c.met, got)
			}
		})
	}
}
