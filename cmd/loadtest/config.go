package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Scenario names, in the order they run.
const (
	scThroughput  = "throughput"
	scEfficiency  = "efficiency"
	scCrash       = "crash"
	scGraceful    = "graceful"
	scWorkerCrash = "worker-crash"
	scSmallJob    = "small-job"
	scWordcount   = "wordcount"
	scStraggler   = "straggler"
	scMillion     = "million"
	scLoaded      = "loaded"
	scOutage      = "nats-outage"
	scNATSCluster = "nats-cluster"
)

var allScenarios = append([]string{scThroughput, scEfficiency, scSmallJob, scWordcount, scStraggler, scCrash, scGraceful, scWorkerCrash,
	scMillion, scOutage, scNATSCluster, scLoaded, scKeyed, scKeyedLoaded, scCSVSum, scPrograms, scLongRead, scScale, scThousand, scStatus, scSchedules}, failClasses...)

// Config is one load-test run. Zero fields do not take defaults: start from DefaultConfig or
// QuickConfig, which hold the defaults; the flags say more.
type Config struct {
	Dir              string   // worker logs and server data; "": a temporary folder, removed unless Keep or the run failed
	Keep             bool     // keep Dir after a successful run
	WorkerBin        string   // "": built from ./cmd/worker into Dir
	ConnStr, NATSURL string   // attach to running servers; "": start Azurite and NATS on 127.0.0.1
	Scenarios        []string // a subset of allScenarios
	Seed             uint64   // makes kill points and the choice of victims reproducible
	Quick            bool     // the small correctness run: targets are reported, not judged

	Workers     int // worker processes in every cluster
	Concurrency int // shards run at once per worker (WORKER_CONCURRENCY)

	ThroughputShards      int   // shards of each zero-duration sleep job
	ThroughputRuns        int   // rounds of (job, every baseline); the best of each counts
	ThroughputConcurrency int   // of the throughput cluster; 0 is the worker's default
	BaselinePrefetch      []int // per-worker prefetch depths the baseline tries; the best counts

	// EfficiencyDurations are the efficiency jobs' shard durations; each job lasts
	// EfficiencyIdeal over Workers × Concurrency slots.
	EfficiencyDurations []time.Duration
	EfficiencyIdeal     time.Duration

	SmallJobRuns    int // small jobs through the client library; the median counts
	SmallJobCLIRuns int // the same through the CLI (worker submit --wait); the median counts
	// KeyedRounds is the interleaved rounds (keyed job, optimized count, naive count) over each
	// keyed corpus; KeyedLoadedRuns the keyed jobs beside a CPU-bound job (keyed-loaded).
	KeyedRounds, KeyedLoadedRuns int
	// KeyedVocabularies are the keyed corpora's distinct words, ascending: the last is written
	// once per word round (about 174 MB at 5M words), the others repeat their words to its size.
	KeyedVocabularies []int
	// CSVRows rows over CSVKeys users, CSVRounds rounds of (keyed sum, naive program) (csv-sum).
	CSVRows, CSVKeys, CSVRounds int
	// ProgramsMB is the programs scenario's corpus in MiB (8 files); ProgramsRounds its rounds
	// of (Python job, Counter process, awk job, awk process).
	ProgramsMB, ProgramsRounds int
	// WordcountBytes is the corpus size of each wordcount job (1k- and 200k-word vocabularies),
	// in shards of WordcountShardBytes; each runs WordcountRuns times, interleaved.
	WordcountBytes, WordcountShardBytes, WordcountRuns int
	// StragglerWorkers, StragglerShards and StragglerDelay size the straggler job; one worker takes
	// ten times StragglerDelay. StragglerRuns rounds of (without, with the straggler); the best of
	// each counts. StragglerSmallShards: the same on Workers workers, reported (0 skips it).
	StragglerWorkers, StragglerShards, StragglerRuns, StragglerSmallShards int
	StragglerDelay                                                         time.Duration

	MillionShards    int           // the big job (its leader is killed at 50 %)
	LoadedDuration   time.Duration // the loaded no-fault run
	OutageDuration   time.Duration // how long the NATS server process stays dead
	NodeDownDuration time.Duration // how long one node of the 3-node NATS cluster stays down

	CrashRuns, GracefulRuns, WorkerCrashRuns int           // failover runs
	DoubleKillEvery                          int           // every n-th crash run also kills the leader that took over
	PrimesEvery                              int           // every n-th leader failover run uses a primes job
	FailoverShards                           int           // shards of the failover jobs
	MapDelay                                 time.Duration // slows the failover clusters' map steps, to kill mid-job
	LeaseDuration                            time.Duration // of every cluster (15s is the Azure minimum)
	ShardTimeout                             time.Duration // AckWait of the failover clusters
	Parallel                                 int           // clusters running failover runs side by side
	JobTimeout                               time.Duration // a job not finished within it is lost
	FailClassRuns                            int           // jobs per failure class (failclass.go)
	FailClassEnv                             []string      // extra worker environment (KEY=VALUE) of the failure classes' clusters

	ScaleWorkers []int // cluster sizes of the scale scenario (idle cost, takeover)
	ScaleJobs    int   // one-shard jobs the scale scenario submits from 8 submitters
	ScaleKills   int   // SIGKILLs of the leader per cluster size (takeover against cluster size)

	Thousand ThousandConfig // the thousand scenario (thousand.go)
}

// DefaultConfig is `make bench`: every scenario at full size, under 10 minutes on 2 cores.
func DefaultConfig() Config {
	return Config{
		Scenarios: slices.Clone(allScenarios),
		Workers:   3, Concurrency: 2,
		ThroughputShards: 100_000, ThroughputRuns: 3, ThroughputConcurrency: 0,
		BaselinePrefetch:    []int{64, 256},
		EfficiencyDurations: []time.Duration{2 * time.Millisecond, 5 * time.Millisecond}, EfficiencyIdeal: 5 * time.Second,
		SmallJobRuns: 100, SmallJobCLIRuns: 100, KeyedRounds: 3, KeyedLoadedRuns: 3, KeyedVocabularies: []int{50_000, 5_000_000}, CSVRows: 2_000_000, CSVKeys: 100_000, CSVRounds: 3,
		ProgramsMB: 174, ProgramsRounds: 3,
		WordcountBytes: 16 << 20, WordcountShardBytes: 32 << 10, WordcountRuns: 2,
		StragglerWorkers: 10, StragglerShards: 4000, StragglerDelay: 20 * time.Millisecond, StragglerSmallShards: 600, StragglerRuns: 3,
		MillionShards:  1_000_000,
		LoadedDuration: 10 * time.Minute, OutageDuration: 30 * time.Second, NodeDownDuration: 10 * time.Second,
		CrashRuns: 20, GracefulRuns: 10, WorkerCrashRuns: 3, DoubleKillEvery: 5, PrimesEvery: 5,
		FailoverShards: 300, MapDelay: 40 * time.Millisecond,
		LeaseDuration: 15 * time.Second, ShardTimeout: 5 * time.Second,
		Parallel: 3, JobTimeout: 3 * time.Minute, FailClassRuns: 10,
		ScaleWorkers: []int{3, 30, 60}, ScaleJobs: 500, ScaleKills: 9,
		Thousand: defaultThousand(),
	}
}

// QuickConfig is `loadtest --quick` and the CI test: a small version of every scenario, judged on
// correctness only, in well under 2 minutes.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Quick = true
	c.ThroughputShards, c.ThroughputRuns, c.BaselinePrefetch = 5_000, 1, []int{64}
	c.EfficiencyIdeal = time.Second
	c.SmallJobRuns, c.SmallJobCLIRuns, c.WordcountBytes, c.WordcountRuns = 3, 3, 2<<20, 1
	c.KeyedRounds, c.KeyedLoadedRuns, c.CSVRows, c.CSVKeys, c.CSVRounds = 1, 1, 50_000, 5_000, 1
	c.ProgramsMB, c.ProgramsRounds = 4, 1
	c.KeyedVocabularies = []int{5_000, 100_000}
	c.StragglerWorkers, c.StragglerShards, c.StragglerSmallShards, c.StragglerRuns, c.MillionShards = 4, 300, 0, 1, 50_000
	c.LoadedDuration, c.OutageDuration, c.NodeDownDuration = 5*time.Second, 3*time.Second, 3*time.Second
	c.CrashRuns, c.GracefulRuns, c.WorkerCrashRuns, c.DoubleKillEvery, c.PrimesEvery = 2, 2, 1, 2, 2
	c.FailoverShards = 200
	c.Parallel = 3
	c.FailClassRuns = 1
	// The slow classes (a storage cut waits out the lease) and the thousand scenario (it builds
	// its member host; package sim tests a host) are left to the full run.
	c.Scenarios = slices.DeleteFunc(c.Scenarios, func(s string) bool { return s == scClassStorageCut || s == scClassNATSNode || s == scThousand })
	c.ScaleWorkers, c.ScaleJobs, c.ScaleKills = []int{3}, 30, 2
	c.Thousand = quickThousand()
	return c
}

func (c *Config) has(s string) bool { return slices.Contains(c.Scenarios, s) }

// slots is the number of shards the efficiency cluster runs at once.
func (c *Config) slots() int { return c.Workers * c.Concurrency }

// parseScenarios reads a comma-separated list ("all" for every one).
func parseScenarios(s string) ([]string, error) {
	if s == "" || s == "all" {
		return slices.Clone(allScenarios), nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allScenarios, p) {
			return nil, fmt.Errorf("unknown scenario %q; known: %s", p, strings.Join(allScenarios, ", "))
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Validate refuses settings that cannot produce a meaningful run.
func (c *Config) Validate() error {
	switch {
	case len(c.Scenarios) == 0:
		return errors.New("no scenario to run")
	case c.Workers < 2 || c.Workers > 16:
		return fmt.Errorf("workers %d: must be 2 to 16 (failover needs a survivor)", c.Workers)
	case c.Concurrency < 1 || c.Concurrency > 256:
		return fmt.Errorf("concurrency %d: must be 1 to 256", c.Concurrency)
	case c.ThroughputConcurrency < 0 || c.ThroughputConcurrency > 4096:
		return fmt.Errorf("throughput concurrency %d: must be 0 (the worker default) to 4096", c.ThroughputConcurrency)
	case c.has(scThroughput) && (c.ThroughputShards < 1000 || c.ThroughputShards > 1_000_000 || c.ThroughputRuns < 1):
		return fmt.Errorf("throughput: %d shards × %d runs: need 1,000 to 1,000,000 shards and at least one run", c.ThroughputShards, c.ThroughputRuns)
	case c.has(scThroughput) && len(c.BaselinePrefetch) == 0:
		return errors.New("throughput: the baseline needs at least one prefetch depth")
	case c.has(scEfficiency) && (len(c.EfficiencyDurations) == 0 || c.EfficiencyIdeal < 100*time.Millisecond):
		return fmt.Errorf("efficiency: %d shard durations, ideal %v: need at least one duration and an ideal makespan of at least 100ms", len(c.EfficiencyDurations), c.EfficiencyIdeal)
	case c.has(scSmallJob) && (c.SmallJobRuns < 1 || c.SmallJobCLIRuns < 0):
		return fmt.Errorf("small-job runs %d through the client, %d through the CLI: need at least one through the client", c.SmallJobRuns, c.SmallJobCLIRuns)
	case c.has(scKeyed) && (c.KeyedRounds < 1 || c.KeyedRounds > 20):
		return fmt.Errorf("--keyed-rounds %d: use 1 to 20", c.KeyedRounds)
	case (c.has(scKeyed) || c.has(scKeyedLoaded)) && (len(c.KeyedVocabularies) == 0 || !slices.IsSorted(c.KeyedVocabularies) ||
		c.KeyedVocabularies[0] < 100 || c.KeyedVocabularies[len(c.KeyedVocabularies)-1] > 20_000_000):
		return fmt.Errorf("--keyed-vocabularies %v: give ascending numbers of distinct words from 100 to 20,000,000", c.KeyedVocabularies)
	case c.has(scKeyedLoaded) && (c.KeyedLoadedRuns < 1 || c.KeyedLoadedRuns > 20):
		return fmt.Errorf("--keyed-loaded-runs %d: use 1 to 20", c.KeyedLoadedRuns)
	case c.has(scCSVSum) && (c.CSVRows < 1000 || c.CSVRows > 100_000_000 || c.CSVKeys < 1 || c.CSVKeys > c.CSVRows):
		return fmt.Errorf("csv-sum: %d rows over %d users: use 1,000 to 100,000,000 rows and 1 to as many users as rows", c.CSVRows, c.CSVKeys)
	case c.has(scCSVSum) && (c.CSVRounds < 1 || c.CSVRounds > 20):
		return fmt.Errorf("--csv-rounds %d: use 1 to 20", c.CSVRounds)
	case c.has(scPrograms) && (c.ProgramsMB < 1 || c.ProgramsMB > 2048):
		return fmt.Errorf("--programs-mb %d: use 1 to 2048 (MiB of the programs corpus)", c.ProgramsMB)
	case c.has(scPrograms) && (c.ProgramsRounds < 1 || c.ProgramsRounds > 20):
		return fmt.Errorf("--programs-rounds %d: use 1 to 20", c.ProgramsRounds)
	case c.has(scWordcount) && (c.WordcountShardBytes < 1024 || c.WordcountBytes < 4*c.WordcountShardBytes || c.WordcountBytes > 256<<20):
		return fmt.Errorf("wordcount: %d bytes in shards of %d: need shards of at least 1 KiB, at least four of them, at most 256 MiB", c.WordcountBytes, c.WordcountShardBytes)
	case c.has(scWordcount) && (c.WordcountRuns < 1 || c.WordcountRuns > 20):
		return fmt.Errorf("wordcount: %d runs: use 1 to 20", c.WordcountRuns)
	case c.has(scStraggler) && (c.StragglerShards < 20 || c.StragglerDelay < time.Millisecond):
		return fmt.Errorf("straggler: %d shards of %v: need at least 20 shards and a delay of at least 1ms", c.StragglerShards, c.StragglerDelay)
	case c.has(scStraggler) && (c.StragglerWorkers < 2 || c.StragglerWorkers > 32):
		return fmt.Errorf("straggler workers %d: use 2 to 32 (one of them is the slow one)", c.StragglerWorkers)
	case c.has(scStraggler) && (c.StragglerRuns < 1 || c.StragglerRuns > 20):
		return fmt.Errorf("straggler runs %d: use 1 to 20 rounds", c.StragglerRuns)
	case c.has(scStraggler) && c.StragglerSmallShards != 0 && c.StragglerSmallShards < 20:
		return fmt.Errorf("straggler small shards %d: use 0 (skip the %d-worker comparison) or at least 20", c.StragglerSmallShards, c.Workers)
	case c.has(scMillion) && (c.MillionShards < 1000 || c.MillionShards > 1_000_000):
		return fmt.Errorf("million: %d shards: use 1,000 to 1,000,000", c.MillionShards)
	case c.has(scLoaded) && c.LoadedDuration < time.Second:
		return fmt.Errorf("loaded duration %v: must be at least 1s", c.LoadedDuration)
	case c.has(scOutage) && (c.OutageDuration < time.Second || c.OutageDuration > 5*time.Minute):
		return fmt.Errorf("outage duration %v: use 1s to 5m", c.OutageDuration)
	case c.has(scNATSCluster) && (c.NodeDownDuration < time.Second || c.NodeDownDuration > 5*time.Minute):
		return fmt.Errorf("node down duration %v: use 1s to 5m", c.NodeDownDuration)
	case c.CrashRuns < 0 || c.GracefulRuns < 0 || c.WorkerCrashRuns < 0:
		return errors.New("run counts must not be negative")
	case c.FailoverShards < 20:
		return fmt.Errorf("failover shards %d: need at least 20 to kill at 10%% to 90%% progress", c.FailoverShards)
	case c.LeaseDuration < 15*time.Second || c.LeaseDuration > 60*time.Second:
		return fmt.Errorf("lease duration %v: Azure allows 15s to 60s", c.LeaseDuration)
	case c.ShardTimeout < time.Second:
		return fmt.Errorf("shard timeout %v: must be at least 1s", c.ShardTimeout)
	case c.MapDelay < 0:
		return fmt.Errorf("map delay %v: must not be negative", c.MapDelay)
	case c.FailClassRuns < 1 || c.FailClassRuns > 100:
		return fmt.Errorf("failure class runs %d: use 1 to 100", c.FailClassRuns)
	case c.ScaleKills < 1 || c.ScaleKills > 50:
		return fmt.Errorf("--scale-kills %d: use 1 to 50 SIGKILLs of the leader per cluster size", c.ScaleKills)
	case c.Parallel < 1 || c.Parallel > 8:
		return fmt.Errorf("parallel %d: must be 1 to 8 clusters", c.Parallel)
	case c.JobTimeout < c.LeaseDuration*3:
		return fmt.Errorf("job timeout %v: must be at least three lease durations (%v)", c.JobTimeout, 3*c.LeaseDuration)
	}
	if c.has(scThousand) {
		if err := c.Thousand.Validate(); err != nil {
			return err
		}
	}
	for _, kv := range c.FailClassEnv {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.ToUpper(k) != k {
			return fmt.Errorf("failure class env %q: want KEY=VALUE, e.g. PROBE_AFTER=150ms", kv)
		}
	}
	for _, p := range c.BaselinePrefetch {
		if p < 1 || p > 65536 {
			return fmt.Errorf("baseline prefetch %d: must be 1 to 65536", p)
		}
	}
	return nil
}
