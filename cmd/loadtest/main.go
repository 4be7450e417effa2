package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

type outputs struct {
	json, markdown, plot string
	strict               bool
}

func realMain(args []string, stdout, stderr io.Writer) int {
	say := rig.Sayer(stderr, "loadtest")
	cfg, out, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return rig.ExitOK
	}
	if err != nil {
		return say(rig.ExitUsage, "%v", err)
	}
	ctx, stop := rig.Interruptible()
	defer stop()
	rep, tls, runErr := Run(ctx, cfg, stderr)
	if rep == nil {
		return say(rig.ExitUsage, "%v", runErr)
	}
	code := rig.ExitOK
	if err := writeOutputs(rep, tls, out, stdout); err != nil {
		code = say(rig.ExitFailed, "%v", err)
	}
	switch {
	case ctx.Err() != nil:
		return say(rig.ExitInterrupted, "interrupted; everything it started is stopped")
	case runErr != nil:
		code = say(rig.ExitFailed, "%v", runErr)
	}
	if !rep.Correct() {
		code = say(rig.ExitFailed, "FAILED: %d wrong results, %d lost jobs", rep.WrongResults, rep.LostJobs)
	}
	if m := rep.Missed(); len(m) > 0 {
		var names []string
		for _, t := range m {
			names = append(names, fmt.Sprintf("%s (%s, measured %s%s)", t.Name, t.Want, rig.Num(t.Value), t.Unit))
		}
		say(0, "targets missed: %s", strings.Join(names, "; "))
		if out.strict {
			code = rig.ExitFailed
		}
	}
	return code
}

// writeOutputs writes the plot, the JSON report and the Markdown summary (to stdout as well).
func writeOutputs(rep *Report, tls []*rig.Timeline, out outputs, stdout io.Writer) error {
	var errs []error
	if out.plot != "" {
		if err := rig.WriteSVGFile(out.plot, tls); err != nil {
			errs = append(errs, fmt.Errorf("plot: %w", err))
		} else {
			rep.Plot = out.plot
		}
	}
	var md bytes.Buffer
	writeMarkdown(&md, rep)
	return errors.Join(append(errs, rig.WriteReport(stdout, md.Bytes(), out.markdown, out.json, rep))...)
}

// parseFlags reads the command line. --quick switches the defaults to QuickConfig; flags given
// explicitly override either set.
func parseFlags(args []string, stderr io.Writer) (Config, outputs, error) {
	parse := func(cfg *Config, out *outputs) (*flag.FlagSet, error) {
		fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
		fs.SetOutput(stderr)
		fs.Usage = func() {
			fmt.Fprintf(stderr, "Usage: loadtest [flags]\n\n"+
				"Failover load test and benchmark of mapagg: starts Azurite and NATS on 127.0.0.1 (or attaches),\n"+
				"runs worker clusters at the worker's default settings, kills leaders, workers, the NATS server\n"+
				"and a node of a NATS cluster, cuts a leader from NATS or storage, and reports throughput,\n"+
				"CPU per shard, efficiency, latency, memory, failover times by failure class and correctness\n"+
				"against the targets of issues 11-13, 21, 32 and 34 (keyed jobs and program jobs against\n"+
				"single-process programs over the same files, in wall time and CPU-seconds of every process).\n"+
				"The full run (make bench) takes about an hour on 2 cores, 10 minutes of it the loaded no-fault\n"+
				"run (--loaded-duration); --scenarios picks some; --quick runs small versions of all in a few\n"+
				"minutes. Exits non-zero on any wrong result or lost job.\n\nFlags:\n")
			fs.PrintDefaults()
		}
		fs.BoolVar(&cfg.Quick, "quick", cfg.Quick, "small versions of every scenario, judged on correctness only (about a minute)")
		fs.StringVar(&out.json, "json", "", "write the JSON report to `FILE`")
		fs.StringVar(&out.markdown, "markdown", "", "write the Markdown summary to `FILE` (it is printed to stdout as well)")
		fs.StringVar(&out.plot, "plot", "", "write the timeline plot (SVG) to `FILE.svg`")
		fs.BoolVar(&out.strict, "strict", false, "exit non-zero when a target is missed, too")
		scen := fs.String("scenarios", strings.Join(cfg.Scenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ", "))
		fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of kill points and victims (0: random, printed)")
		fs.StringVar(&cfg.WorkerBin, "worker-bin", "", "worker binary (default: go build ./cmd/worker)")
		fs.StringVar(&cfg.ConnStr, "azure-connection-string", "", "attach to this Azure Storage (default: start Azurite on 127.0.0.1)")
		fs.StringVar(&cfg.NATSURL, "nats-url", "", "attach to this NATS server with JetStream (default: start one in-process on 127.0.0.1)")
		fs.StringVar(&cfg.Dir, "dir", "", "directory for logs and server data (default: a temporary one, removed on success)")
		fs.BoolVar(&cfg.Keep, "keep", false, "keep --dir after a successful run")
		fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "worker processes per cluster")
		fs.IntVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "shards run at once per worker (efficiency and failover clusters)")
		fs.IntVar(&cfg.ThroughputShards, "throughput-shards", cfg.ThroughputShards, "shards per throughput job")
		fs.IntVar(&cfg.ThroughputRuns, "throughput-runs", cfg.ThroughputRuns, "throughput jobs (the best counts)")
		fs.IntVar(&cfg.ThroughputConcurrency, "throughput-concurrency", cfg.ThroughputConcurrency, "worker concurrency of the throughput cluster")
		prefetch := fs.String("baseline-prefetch", rig.JoinList(cfg.BaselinePrefetch), "per-worker prefetch depths the baseline tries (the best counts)")
		effDur := fs.String("efficiency-durations", rig.JoinList(cfg.EfficiencyDurations), "comma-separated shard durations of the efficiency jobs")
		fs.DurationVar(&cfg.EfficiencyIdeal, "efficiency-ideal", cfg.EfficiencyIdeal, "ideal makespan of each efficiency job (sets its shard count)")
		fs.IntVar(&cfg.SmallJobRuns, "small-job-runs", cfg.SmallJobRuns, "primes-below-2·10^7 jobs of 200 shards on an idle cluster through the client library (the median counts)")
		fs.IntVar(&cfg.SmallJobCLIRuns, "small-job-cli-runs", cfg.SmallJobCLIRuns, "the same jobs through the CLI, worker submit --wait, exec to exit (the median counts; 0: none)")
		fs.IntVar(&cfg.KeyedRounds, "keyed-rounds", cfg.KeyedRounds, "interleaved rounds (keyed wordcount, optimized count, naive count) over each keyed corpus (medians count)")
		vocab := fs.String("keyed-vocabularies", rig.JoinList(cfg.KeyedVocabularies), "distinct words of the keyed corpora, ascending: the last written once (5M words: about 174 MB), the others repeated to its size")
		fs.IntVar(&cfg.KeyedLoadedRuns, "keyed-loaded-runs", cfg.KeyedLoadedRuns, "keyed wordcounts of the 5M-word corpus beside a CPU-bound job (keyed-loaded)")
		fs.IntVar(&cfg.CSVRows, "csv-rows", cfg.CSVRows, "CSV rows of the per-user sum (csv-sum)")
		fs.IntVar(&cfg.CSVKeys, "csv-keys", cfg.CSVKeys, "users of the per-user sum")
		fs.IntVar(&cfg.CSVRounds, "csv-rounds", cfg.CSVRounds, "interleaved rounds (keyed sum, naive Go program) of the per-user sum (medians count)")
		fs.IntVar(&cfg.ProgramsMB, "programs-mb", cfg.ProgramsMB, "corpus of the program jobs in MiB, 8 files of 50k distinct words (programs)")
		fs.IntVar(&cfg.ProgramsRounds, "programs-rounds", cfg.ProgramsRounds, "interleaved rounds (Python job, one Python Counter process, awk job, one awk process) of the program jobs (medians count)")
		fs.IntVar(&cfg.WordcountBytes, "wordcount-bytes", cfg.WordcountBytes, "corpus size of each wordcount job")
		fs.IntVar(&cfg.WordcountShardBytes, "wordcount-shard-bytes", cfg.WordcountShardBytes, "shard size of the wordcount jobs")
		fs.IntVar(&cfg.WordcountRuns, "wordcount-runs", cfg.WordcountRuns, "runs of each wordcount job, interleaved (the best of each counts)")
		fs.IntVar(&cfg.StragglerWorkers, "straggler-workers", cfg.StragglerWorkers, "workers of the straggler clusters (one of them 10× slower in the second run)")
		fs.IntVar(&cfg.StragglerShards, "straggler-shards", cfg.StragglerShards, "shards of each straggler job")
		fs.DurationVar(&cfg.StragglerDelay, "straggler-delay", cfg.StragglerDelay, "map delay of the straggler clusters (the slow worker gets 10×)")
		fs.IntVar(&cfg.StragglerRuns, "straggler-runs", cfg.StragglerRuns, "rounds of (job without, job with the straggler); the best makespan of each counts")
		fs.IntVar(&cfg.StragglerSmallShards, "straggler-small-shards", cfg.StragglerSmallShards, "shards of the same straggler comparison on --workers workers, reported against its capacity bound (0: skip)")
		fs.IntVar(&cfg.MillionShards, "million-shards", cfg.MillionShards, "shards of the big job (leader killed at 50%)")
		fs.DurationVar(&cfg.LoadedDuration, "loaded-duration", cfg.LoadedDuration, "length of the loaded no-fault run that counts false takeovers")
		fs.DurationVar(&cfg.OutageDuration, "outage-duration", cfg.OutageDuration, "how long the NATS server process stays dead in the outage run")
		fs.DurationVar(&cfg.NodeDownDuration, "node-down-duration", cfg.NodeDownDuration, "how long one node of the 3-node NATS cluster stays down")
		fs.IntVar(&cfg.CrashRuns, "crash-runs", cfg.CrashRuns, "leader crash (SIGKILL) runs")
		fs.IntVar(&cfg.GracefulRuns, "graceful-runs", cfg.GracefulRuns, "graceful handover (SIGTERM) runs")
		fs.IntVar(&cfg.WorkerCrashRuns, "worker-crash-runs", cfg.WorkerCrashRuns, "follower crash (SIGKILL) runs")
		fs.IntVar(&cfg.DoubleKillEvery, "double-kill-every", cfg.DoubleKillEvery, "every n-th crash run also kills the next leader (0: never)")
		fs.IntVar(&cfg.PrimesEvery, "primes-every", cfg.PrimesEvery, "every n-th leader run uses a primes job (0: never)")
		fs.IntVar(&cfg.FailoverShards, "failover-shards", cfg.FailoverShards, "shards of each failover job")
		fs.DurationVar(&cfg.MapDelay, "map-delay", cfg.MapDelay, "map delay of the failover clusters (makes a job last long enough to kill)")
		fs.DurationVar(&cfg.LeaseDuration, "lease-duration", cfg.LeaseDuration, "leader lease of the clusters (15s to 60s)")
		fs.DurationVar(&cfg.ShardTimeout, "shard-timeout", cfg.ShardTimeout, "shard timeout (AckWait) of the failover clusters")
		fs.IntVar(&cfg.Parallel, "parallel", cfg.Parallel, "clusters running failover runs side by side")
		fs.DurationVar(&cfg.JobTimeout, "job-timeout", cfg.JobTimeout, "a job not finished within this is lost")
		fs.IntVar(&cfg.FailClassRuns, "failclass-runs", cfg.FailClassRuns, "jobs per failure class (the class-* scenarios)")
		fcEnv := fs.String("failclass-env", rig.JoinList(cfg.FailClassEnv), "comma-separated KEY=VALUE worker environment of the failure classes' clusters (e.g. HEARTBEAT_INTERVAL=100ms,PROBE_AFTER=120ms)")
		scaleWorkers := fs.String("scale-workers", rig.JoinList(cfg.ScaleWorkers), "cluster sizes of the scale scenario (idle cost, takeover)")
		fs.IntVar(&cfg.ScaleJobs, "scale-jobs", cfg.ScaleJobs, "one-shard jobs the scale scenario submits from 8 submitters (0: none)")
		fs.IntVar(&cfg.ScaleKills, "scale-kills", cfg.ScaleKills, "SIGKILLs of the leader per cluster size in the scale scenario (their median is compared across sizes)")
		registerThousandFlags(fs, &cfg.Thousand)
		if err := fs.Parse(args); err != nil {
			return fs, err
		}
		if fs.NArg() > 0 {
			return fs, fmt.Errorf("unexpected arguments %v", fs.Args())
		}
		var err error
		if cfg.Scenarios, err = parseScenarios(*scen); err != nil {
			return fs, err
		}
		if cfg.EfficiencyDurations, err = parseDurations(*effDur); err != nil {
			return fs, fmt.Errorf("--efficiency-durations: %w", err)
		}
		if cfg.FailClassEnv, err = rig.ParseList(*fcEnv, "KEY=VALUE", func(f string) (string, error) { return f, nil }, func(f string) bool { return strings.Contains(f, "=") }); err != nil {
			return fs, fmt.Errorf("--failclass-env: %w", err)
		}
		if cfg.BaselinePrefetch, err = rig.ParseList(*prefetch, "a number", strconv.Atoi, func(int) bool { return true }); err != nil {
			return fs, fmt.Errorf("--baseline-prefetch: %w", err)
		}
		if cfg.KeyedVocabularies, err = rig.ParseList(*vocab, "a number of distinct words", strconv.Atoi, func(n int) bool { return n > 0 }); err != nil {
			return fs, fmt.Errorf("--keyed-vocabularies: %w", err)
		}
		if cfg.ScaleWorkers, err = rig.ParseList(*scaleWorkers, "a number of workers from 1 to 200", strconv.Atoi, func(n int) bool { return n >= 1 && n <= 200 }); err != nil {
			return fs, fmt.Errorf("--scale-workers: %w", err)
		}
		return fs, nil
	}
	cfg, out := DefaultConfig(), outputs{}
	if _, err := parse(&cfg, &out); err != nil {
		return cfg, out, err
	}
	if cfg.Quick {
		cfg, out = QuickConfig(), outputs{}
		if _, err := parse(&cfg, &out); err != nil {
			return cfg, out, err
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano())
	}
	return cfg, out, cfg.Validate()
}

func parseDurations(s string) ([]time.Duration, error) {
	return rig.ParseList(s, "a positive duration (e.g. 2ms)", time.ParseDuration, func(d time.Duration) bool { return d > 0 })
}
