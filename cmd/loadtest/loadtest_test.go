package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/report"
)

// TestQuick is `loadtest --quick` in CI: every scenario at small size against real Azurite, NATS
// and worker processes, with leaders and workers killed mid-job. It asserts correctness only:
// every job ends with its exact result and none is lost. Speed is a benchmark (make bench),
// not a test. It takes a few minutes; its bound of ten is for a machine busy with other work.
func TestQuick(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Azurite, NATS and worker processes; about a minute")
	}
	cfg := QuickConfig()
	cfg.Seed = uint64(time.Now().UnixNano())
	cfg.Dir = t.TempDir()
	cfg.Keep = true // t.TempDir removes it; worker logs stay readable until then
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Second)
	defer cancel()
	var progress bytes.Buffer
	rep, tls, err := Run(ctx, cfg, &progress)
	t.Logf("seed %d; progress:\n%s", cfg.Seed, progress.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if rep.WrongResults != 0 || rep.LostJobs != 0 {
		t.Errorf("%d wrong results, %d lost jobs: %s", rep.WrongResults, rep.LostJobs, strings.Join(rep.Errors, "; "))
	}
	// The run must have done what it claims: every scenario ran and every kill happened.
	if rep.Throughput == nil || len(rep.Throughput.Runs) != cfg.ThroughputRuns || rep.Throughput.BaselinePerS <= 0 {
		t.Errorf("throughput not measured: %+v", rep.Throughput)
	}
	if len(rep.Efficiency) != len(cfg.EfficiencyDurations) {
		t.Errorf("efficiency: %d jobs, want %d", len(rep.Efficiency), len(cfg.EfficiencyDurations))
	}
	for _, e := range rep.Efficiency {
		if e.MakespanS <= 0 || !e.Exact {
			t.Errorf("efficiency not measured: %+v", e)
		}
	}
	if sj := rep.SmallJob; sj == nil || sj.Runs != cfg.SmallJobRuns || sj.Exact != sj.Runs {
		t.Errorf("small job: %+v", sj)
	}
	if sc := rep.SmallCLI; sc == nil || len(sc.CLIS) != cfg.SmallJobCLIRuns || sc.ComputeS <= 0 || sc.ClientRatio <= 0 {
		t.Errorf("small job through the CLI and its bare compute: %+v", sc)
	}
	if k := rep.Keyed; k == nil || len(k.Corpora) != 2 || k.Loaded == nil {
		t.Errorf("keyed: two corpora and the loaded runs: %+v", k)
	} else {
		for _, kc := range k.Corpora {
			if len(kc.Rounds) != cfg.KeyedRounds || kc.FastRatio <= 0 || kc.NaiveRatio <= 0 || kc.FastCPURatio <= 0 {
				t.Errorf("keyed, %d keys: %d rounds (want %d) with every ratio: %+v", kc.Keys, len(kc.Rounds), cfg.KeyedRounds, kc)
			}
			for _, x := range kc.Rounds {
				if !x.Exact || x.CPU.Workers <= 0 || x.CPU.Storage <= 0 || len(x.PeakMiB) != cfg.Workers {
					t.Errorf("keyed round: exact, with the CPU of every process and every worker's peak RSS: %+v", x)
				}
			}
		}
		if kl := k.Loaded; len(kl.Runs) != cfg.KeyedLoadedRuns || kl.Exact != len(kl.Runs) || kl.MaxPeakMiB <= 0 || kl.Runs[0].PiJobs == 0 {
			t.Errorf("keyed beside pi jobs: %+v", kl)
		}
	}
	if cs := rep.CSVSum; cs == nil || len(cs.Rounds) != cfg.CSVRounds || !cs.Rounds[0].Exact || cs.Ratio <= 0 {
		t.Errorf("csv sum: %+v", cs)
	}
	if p := rep.Programs; p == nil || p.Skipped == "" && (len(p.Rounds) != cfg.ProgramsRounds || !p.Rounds[0].Python.Exact || !p.Rounds[0].Awk.Exact ||
		p.PythonJob.Ratio <= 0 || p.AwkJob.Ratio <= 0 || p.Rounds[0].Python.CPU.Programs <= 0) {
		t.Errorf("programs: every round exact, with the programs' CPU: %+v", p)
	}
	if lr := rep.LongRead; lr == nil || !lr.Exact || lr.MakespanS < lr.WantS {
		t.Errorf("long read: %+v", lr)
	}
	if wc := rep.Wordcount; wc == nil || len(wc.Jobs) != 2*cfg.WordcountRuns || !wc.Jobs[0].Exact || !wc.Jobs[1].Exact {
		t.Errorf("wordcount: %+v", wc)
	}
	if st := rep.Straggler; st == nil || !st.Exact || st.ReferenceS <= 0 {
		t.Errorf("straggler: %+v", st)
	}
	if m := rep.Million; m == nil || !m.Exact || !m.Killed || m.RSSSamples == 0 {
		t.Errorf("big job: exact and its leader killed, with memory samples: %+v", m)
	}
	if o := rep.Outage; o == nil || !o.Exact || o.DownS <= 0 || o.LeaderChanges > 1 {
		t.Errorf("nats outage: exact, NATS down, at most one leader change: %+v", o)
	}
	if n := rep.NATSCluster; n == nil || !n.Exact || n.DownS <= 0 {
		t.Errorf("nats cluster: exact with a node down: %+v", n)
	}
	if len(rep.FailClasses) != 4 {
		t.Errorf("failure classes: %d ran, want 4 (the quick ones)", len(rep.FailClasses))
	}
	for _, fc := range rep.FailClasses {
		if fc.Runs != 1 || fc.Exact != 1 || classTakesOver(fc.Class) != (fc.ToLeader.N == 1) {
			t.Errorf("failure class %s: one exact run, a takeover when the class makes one: %+v", fc.Class, fc)
		}
	}
	if l := rep.Loaded; l == nil || l.Jobs == 0 || l.Exact != l.Jobs {
		t.Errorf("loaded run: every job exact: %+v", l)
	} else if l.Elections != 0 || l.BrokeLeases != 0 {
		// A takeover of a live leader is a missed target, not a wrong result: on a shared machine
		// a heartbeat can be late beyond the suspicion timeout. make bench judges it over 10
		// minutes on a quiet machine.
		t.Logf("loaded run: %d leader changes, %d lease breaks with nothing killed", l.Elections, l.BrokeLeases)
	}
	for _, c := range []struct {
		name string
		runs []report.FailoverRun
		want int
	}{
		{"crash", leaderRuns(rep.Failover.Crash), cfg.CrashRuns},
		{"graceful", leaderRuns(rep.Failover.Graceful), cfg.GracefulRuns},
		{"worker crash", workerRuns(rep.WorkerCrash), cfg.WorkerCrashRuns},
	} {
		if len(c.runs) != c.want {
			t.Errorf("%s: %d runs, want %d", c.name, len(c.runs), c.want)
		}
		for _, r := range c.runs {
			if r.Skipped == "" && len(r.Kills) == 0 {
				t.Errorf("%s run %d: no kill recorded", c.name, r.N)
			}
			for _, k := range r.Kills {
				if k.Leader && k.NewLeader == "" {
					t.Errorf("%s run %d: no new leader after killing %s", c.name, r.N, k.Worker)
				}
			}
		}
	}
	if rep.Jobs < cfg.ThroughputRuns+1+cfg.CrashRuns+cfg.GracefulRuns+cfg.WorkerCrashRuns {
		t.Errorf("only %d jobs submitted", rep.Jobs)
	}

	// The outputs render.
	dir := t.TempDir()
	out := outputs{json: filepath.Join(dir, "r.json"), markdown: filepath.Join(dir, "r.md"), plot: filepath.Join(dir, "r.svg")}
	var stdout bytes.Buffer
	if err := writeOutputs(rep, tls, out, &stdout); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	b, _ := os.ReadFile(out.json)
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("json report: %v", err)
	}
	for _, k := range []string{"throughput", "efficiency", "failover", "small_job", "small_job_cli", "wordcount", "straggler", "million", "loaded",
		"nats_outage", "nats_cluster", "keyed", "csv_sum", "long_read", "redone_shards", "wrong_results", "lost_jobs"} {
		if _, ok := m[k]; !ok {
			t.Errorf("json report lacks %q", k)
		}
	}
	if svg, _ := os.ReadFile(out.plot); !bytes.Contains(svg, []byte("<svg")) || !bytes.Contains(svg, []byte("SIGKILL")) ||
		!bytes.Contains(svg, []byte("nats-server")) || !bytes.Contains(svg, []byte("NATS outage")) {
		t.Errorf("plot has no kill or NATS outage marked")
	}
	if !strings.Contains(stdout.String(), "| wrong results | 0 |") {
		t.Errorf("markdown summary:\n%s", stdout.String())
	}
}

func leaderRuns(f *report.LeaderFailover) []report.FailoverRun {
	if f == nil {
		return nil
	}
	return f.Runs
}

func workerRuns(w *report.WorkerCrash) []report.FailoverRun {
	if w == nil {
		return nil
	}
	return w.Runs
}
