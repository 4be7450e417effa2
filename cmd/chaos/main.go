package main

import (
	"bytes"
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

func main() { os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr)) }

func realMain(args []string, stdout, stderr io.Writer) int {
	say := rig.Sayer(stderr, "chaos")
	cfg, jsonPath, mdPath, keep, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return rig.ExitOK
	}
	if err != nil {
		return say(rig.ExitUsage, "%v", err)
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "chaos-"); err != nil {
			return say(rig.ExitFailed, "%v", err)
		}
		if !keep {
			defer os.RemoveAll(cfg.Dir)
		}
	}
	ctx, stop := rig.Interruptible()
	defer stop()
	rep, runErr := Run(ctx, cfg, stderr)
	if rep == nil {
		return say(rig.ExitUsage, "%v", runErr)
	}
	code := rig.ExitOK
	var md bytes.Buffer
	rep.WriteMarkdown(&md)
	if err := rig.WriteReport(stdout, md.Bytes(), mdPath, jsonPath, rep); err != nil {
		code = say(rig.ExitFailed, "%v", err)
	}
	if keep {
		say(0, "logs and data kept in %s", cfg.Dir)
	}
	switch {
	case ctx.Err() != nil:
		return say(rig.ExitInterrupted, "interrupted; everything it started is stopped")
	case runErr != nil:
		return say(rig.ExitFailed, "%v", runErr)
	case !rep.OK():
		return say(rig.ExitFailed, "FAILED: %d of %d faults failed", rep.Failed, len(rep.Results))
	}
	return code
}

func parseFlags(args []string, stderr io.Writer) (cfg Config, jsonPath, mdPath string, keep bool, err error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: chaos [flags]

The fault matrix: on a real local cluster (Azurite blob and queue processes, a nats-server
process, worker processes) it runs a job with a known answer per fault, injects the fault
mid-job, heals it, and prints a table: fault | verdict | result exact? | time lost | anything
left behind. Exit status 1 when any job is wrong, stuck, lost or slow to cancel, or anything is
left behind; 2 on a usage error; 130 on Ctrl-C (everything started is stopped).

Needs Azurite (make azurite) and bin/nats-server (make nats-server; built here when absent).

Faults: %s

Flags:
`, strings.Join(faultNames(), ", "))
		fs.PrintDefaults()
	}
	d := DefaultConfig()
	quick := fs.Bool("quick", false, "the quick run: a smaller job and only the cheap faults ("+strings.Join(quickFaults, ", ")+")")
	faults := fs.String("faults", "", "comma-separated faults to run (default: all, or the quick ones with --quick)")
	dir := fs.String("dir", "", "folder for server data and worker logs (default: a temporary folder)")
	fs.BoolVar(&keep, "keep", false, "keep the folder (worker logs) after the run")
	workerBin := fs.String("worker-bin", "", "a prebuilt worker binary (default: build one)")
	natsBin := fs.String("nats-bin", "", "the nats-server binary (default: bin/nats-server, built when absent)")
	fs.StringVar(&jsonPath, "json", "", "write the JSON report here")
	fs.StringVar(&mdPath, "markdown", "", "write the Markdown table here (it is printed too)")
	shards := fs.Int("shards", 0, fmt.Sprintf("shards of the sleep job (default %d, quick %d)", d.Shards, QuickConfig().Shards))
	delay := fs.Duration("shard-delay", 0, fmt.Sprintf("duration of each sleep shard (default %v, quick %v)", d.ShardDelay, QuickConfig().ShardDelay))
	deadline := fs.Duration("deadline", d.Deadline, "a job not ended this long after its fault is healed is stuck")
	cancelWithin := fs.Duration("cancel-within", d.CancelWithin, "a job cancelled during a failover must end this long after the new election")
	if err = fs.Parse(args); err != nil {
		return cfg, "", "", false, err
	}
	if fs.NArg() > 0 {
		return cfg, "", "", false, fmt.Errorf("unexpected arguments %q (see chaos -h)", fs.Args())
	}
	cfg = d
	if *quick {
		cfg = QuickConfig()
	}
	if *faults != "" {
		cfg.Faults = strings.Split(*faults, ",")
	}
	cfg.Shards, cfg.ShardDelay = cmp.Or(*shards, cfg.Shards), cmp.Or(*delay, cfg.ShardDelay)
	cfg.Dir, cfg.WorkerBin, cfg.NATSBin = *dir, *workerBin, *natsBin
	cfg.Deadline, cfg.CancelWithin = *deadline, *cancelWithin
	probe := cfg
	if probe.Dir == "" {
		probe.Dir = "-"
	}
	if err := probe.Validate(); err != nil {
		return cfg, "", "", false, err
	}
	return cfg, jsonPath, mdPath, keep, nil
}
