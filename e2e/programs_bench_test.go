package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

// TestProgramsBench_PythonWordcount is the programs scenario of cmd/loadtest (make
// bench-programs) with knobs for profiling: the word count of examples/programs/wordcount.py
// through a 2-worker cluster against one plain Python Counter process over the same files, two
// rounds, every job's output checked. MAPAGG_PROGRAM_BENCH is the corpus in MiB;
// MAPAGG_PROGRAM_BENCH_AWK=1 adds the awk job and one awk process; MAPAGG_PROGRAM_BENCH_SHARD_MB
// (32), _PARTITIONS (2) and _CONCURRENCY (1) shape the job and the workers; _PPROF=1 serves the
// workers' profiles.
func TestProgramsBench_PythonWordcount(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("MAPAGG_PROGRAM_BENCH"))
	if mb <= 0 {
		t.Skip("set MAPAGG_PROGRAM_BENCH=174 (the corpus in MiB) to profile program jobs; their figures: make bench-programs")
	}
	py, err := pythonPath()
	if err != nil {
		t.Skip("python3 is not installed")
	}
	root, _ := filepath.Abs("..")
	shardMB := 32
	if v, _ := strconv.Atoi(os.Getenv("MAPAGG_PROGRAM_BENCH_SHARD_MB")); v > 0 {
		shardMB = v
	}
	// One reduce partition a worker: a partition is a process start.
	partitions := 2
	if v, _ := strconv.Atoi(os.Getenv("MAPAGG_PROGRAM_BENCH_PARTITIONS")); v > 0 {
		partitions = v
	}
	// Workers without the race detector (the other e2e tests' binary has it): the figures are
	// the product's.
	bin, err := cluster.Build(t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	// MAPAGG_PROGRAM_BENCH_PPROF=1 serves the workers' profiles (their addresses are logged).
	pprof := os.Getenv("MAPAGG_PROGRAM_BENCH_PPROF") != ""
	// MAPAGG_PROGRAM_BENCH_CONCURRENCY sets each worker's concurrency (default 1: one task a
	// worker, one a core of the 2-core hosts it is run on).
	concurrency := 1
	if v, _ := strconv.Atoi(os.Getenv("MAPAGG_PROGRAM_BENCH_CONCURRENCY")); v > 0 {
		concurrency = v
	}
	c := startBin(t, bin, cluster.Options{Workers: 2, LeaseDuration: lease, Concurrency: concurrency, Env: []string{
		"PPROF=" + strconv.FormatBool(pprof),
		"WORKER_PROGRAMS=pywordcount=" + py + " " + filepath.Join(root, "examples", "programs", "wordcount.py") +
			"\nawkwordcount=" + filepath.Join(root, "examples", "programs", "wordcount.sh"),
		"PYTHONPATH=" + filepath.Join(root, "python")}})
	cl := *c.Client
	cl.Validator = &clusterask.Validator{Conn: c.Bus.Conn(), Prefix: c.Names().Prefix, Local: cl.Registry.Types()}
	if pprof {
		for _, id := range []string{"w1", "w2"} {
			t.Logf("%s: go tool pprof http://%s/debug/pprof/profile?seconds=20", id, c.HTTPAddr(id))
		}
	}

	// 50k distinct words, Zipf-like, in 8 files of mb/8 MiB each.
	ctx := context.Background()
	zc, err := corpus.WriteZipfCorpus(ctx, c.Blob(), "bench", "", int64(mb)<<20, 8, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{}
	for _, id := range []string{"w1", "w2"} {
		pids = append(pids, c.Proc(id).PID)
	}
	t.Logf("corpus: %.1f MB in 8 files, %d distinct words; cluster: 2 workers, concurrency %d, shards of %d MiB, %d partitions; the host is shared and loaded", float64(zc.Bytes)/1e6, zc.Distinct, concurrency, shardMB, partitions)
	for round := range 2 {
		types := []string{"pywordcount"}
		if os.Getenv("MAPAGG_PROGRAM_BENCH_AWK") != "" {
			types = append(types, "awkwordcount")
		}
		for _, typ := range types {
			if !rig.WaitNoChildren(ctx, pids, 30*time.Second) { // the last job's session processes have ended
				t.Logf("the workers still have children after 30 s")
			}
			self0, kids0 := cpuSeconds(t, pids)
			store0 := azuriteSeconds()
			t0 := time.Now()
			st, phases := runTimed(t, &cl, typ, fmt.Sprintf(`{"container":"bench","shard_bytes":%d,"partitions":%d}`, shardMB<<20, partitions))
			wall := time.Since(t0)
			t.Logf("round %d: %s: %s", round+1, typ, phases)
			self1, kids1 := cpuSeconds(t, pids)
			self, kids := self1-self0, kids1-kids0
			storage := azuriteSeconds() - store0
			if st.State != jobs.StateSucceeded {
				t.Fatalf("%s: %s %s", typ, st.State, st.Error)
			}
			t.Logf("round %d: cluster %-12s wall %6.2fs  CPU %6.2fs (workers %.2f, their programs %.2f; besides, Azurite's blob server %.2f)", round+1, typ, wall.Seconds(), self+kids, self, kids, storage)
			if err := zc.CheckOutput(ctx, &cl, st.ID); err != nil {
				t.Errorf("%s job %s: %v", typ, st.ID, err)
			}
		}
		logBaseline := func(name string, r corpus.CountRun, err error) {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			t.Logf("round %d: %-26s wall %6.2fs  CPU %6.2fs", round+1, name, r.Wall.Seconds(), r.CPU.Seconds())
		}
		r, err := zc.CounterBaseline(ctx, py, t.TempDir())
		logBaseline("one Python Counter process", r, err)
		if len(types) > 1 {
			r, err := zc.AwkBaseline(ctx)
			logBaseline("one awk process", r, err)
		}
	}
}

// runTimed runs a job and says when (since its submit) each of its phases was first seen.
func runTimed(t *testing.T, cl *client.Client, typ, params string) (*client.Status, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	t0 := time.Now()
	id, err := cl.Submit(ctx, typ, json.RawMessage(params))
	if err != nil {
		t.Fatalf("submit %s: %v", typ, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "submitted %.2fs", time.Since(t0).Seconds())
	last := ""
	st, err := cl.Wait(ctx, id, 50*time.Millisecond, func(s client.Status) {
		if p := string(s.State) + " " + s.Phase; p != last {
			last = p
			fmt.Fprintf(&b, ", %s at %.2fs", strings.TrimSpace(p), time.Since(t0).Seconds())
		}
	})
	if err != nil {
		t.Fatalf("wait for %s job %s: %v", typ, id, err)
	}
	fmt.Fprintf(&b, ", seen %s at %.2fs", st.State, time.Since(t0).Seconds())
	return st, b.String()
}

// cpuSeconds is the CPU time of processes pids (self) and of their children, ended or
// running (rig.ChildrenCPU), in seconds.
func cpuSeconds(t *testing.T, pids []int) (self, children float64) {
	t.Helper()
	for _, pid := range pids {
		d, err := rig.ProcCPU(pid)
		k, err2 := rig.ChildrenCPU(pid)
		if err != nil || err2 != nil {
			t.Fatalf("CPU of pid %d: %v", pid, errors.Join(err, err2))
		}
		self, children = self+d.Seconds(), children+k.Seconds()
	}
	return self, children
}

// azuriteSeconds is the CPU time of this test's Azurite blob server (a child of the test
// process), 0 if it is not found.
func azuriteSeconds() float64 {
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, name := range procs {
		b, err := os.ReadFile(name)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid != os.Getpid() {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join(filepath.Dir(name), "cmdline"))
		if !strings.Contains(string(cmd), "azurite-blob") {
			continue
		}
		for _, i := range []int{11, 12, 13, 14} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return float64(ticks) / 100
}

// startBin starts a cluster of the worker binary bin, stopped when t ends.
func startBin(t *testing.T, bin string, opts cluster.Options) *cluster.Cluster {
	t.Helper()
	opts.Dir = t.TempDir()
	opts.WorkerBin = bin
	opts.ConnStr = testenv.Azurite(t)
	opts.Namespace = testenv.Name(t, "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}
