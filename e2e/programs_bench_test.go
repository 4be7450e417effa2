package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/jobs"
)

// counterPy is the baseline: one plain Python process counting the files.
const counterPy = `import collections, sys
c = collections.Counter()
for path in sys.argv[1:]:
    with open(path) as f:
        for line in f:
            c.update(line.split())
print(len(c), sum(c.values()))
`

// TestProgramsBench_PythonWordcount measures the framework's share of a Python job: the word
// count of examples/programs/wordcount.py through a 2-worker cluster against one plain Python
// process (collections.Counter over str.split) over the same files, in interleaved runs. It
// reports; it asserts only that both counted the same words. MAPAGG_PROGRAM_BENCH_AWK=1 adds
// the awk word count; MAPAGG_PROGRAM_BENCH_SHARD_MB (default 32) and
// MAPAGG_PROGRAM_BENCH_PARTITIONS (default 2) set the job's shards and partitions,
// MAPAGG_PROGRAM_BENCH_CONCURRENCY (default 1) each worker's concurrency. Set MAPAGG_PROGRAM_BENCH to the
// corpus size in MB (the figure: 174) to run it: make bench-programs.
func TestProgramsBench_PythonWordcount(t *testing.T) {
	mb, _ := strconv.Atoi(os.Getenv("MAPAGG_PROGRAM_BENCH"))
	if mb <= 0 {
		t.Skip("set MAPAGG_PROGRAM_BENCH=174 (the corpus size in MB) to measure program jobs: make bench-programs")
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

	// 50k distinct words, Zipf-like, in 8 files of mb/8 MB each.
	dir := t.TempDir()
	var files []string
	ctx := context.Background()
	if _, err := c.Blob().CreateContainer(ctx, "bench", nil); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, 49_999)
	var total int64
	for f := range 8 {
		var b strings.Builder
		for b.Len() < mb<<20/8 {
			for w := range 12 {
				if w > 0 {
					b.WriteByte(' ')
				}
				i := zipf.Uint64()
				if rng.IntN(4) == 0 {
					i = uint64(rng.IntN(50_000))
				}
				b.WriteString("w" + strconv.FormatUint(i, 36))
			}
			b.WriteByte('\n')
		}
		name := filepath.Join(dir, fmt.Sprintf("%d.txt", f))
		if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, name)
		if _, err := c.Blob().UploadBuffer(ctx, "bench", filepath.Base(name), []byte(b.String()), nil); err != nil {
			t.Fatal(err)
		}
		total += int64(b.Len())
	}
	script := filepath.Join(dir, "counter.py")
	if err := os.WriteFile(script, []byte(counterPy), 0o644); err != nil {
		t.Fatal(err)
	}
	pids := []int{}
	for _, id := range []string{"w1", "w2"} {
		pids = append(pids, c.Proc(id).PID)
	}
	t.Logf("corpus: %.1f MB in 8 files, 50k distinct words; cluster: 2 workers, concurrency %d, shards of %d MiB, %d partitions; the host is shared and loaded", float64(total)/1e6, concurrency, shardMB, partitions)
	for round := range 2 {
		types := []string{"pywordcount"}
		if os.Getenv("MAPAGG_PROGRAM_BENCH_AWK") != "" {
			types = append(types, "awkwordcount")
		}
		for _, typ := range types {
			waitNoChildren(t, pids) // the last job's session processes have ended
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
			if round == 0 && typ == "pywordcount" {
				checkBench(t, &cl, st.ID, files)
			}
		}
		cmd := exec.Command(py, append([]string{script}, files...)...)
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		wall := time.Since(t0)
		if err != nil {
			t.Fatalf("baseline: %v\n%s", err, out)
		}
		cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		t.Logf("round %d: one Python Counter process  wall %6.2fs  CPU %6.2fs  (%s)", round+1, wall.Seconds(), cpu, strings.TrimSpace(string(out)))
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

// cpuSeconds sums the CPU time of processes (self) and of their children (/proc/PID/stat): the
// waited-for ones, and those still running (a program's session process outlives the job's
// end by up to a second: its CPU time is counted as it stands).
func cpuSeconds(t *testing.T, pids []int) (self, children float64) {
	var ticks [2]int64
	parent := map[int]bool{}
	for _, pid := range pids {
		parent[pid] = true
		f := statFields(t, pid)
		for j, i := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks[j/2] += n
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, name := range procs {
		b, err := os.ReadFile(name)
		if err != nil {
			continue // it ended meanwhile: its parent's cutime has it
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if ppid, _ := strconv.Atoi(f[1]); !parent[ppid] {
			continue
		}
		for _, i := range []int{11, 12, 13, 14} {
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks[1] += n
		}
	}
	return float64(ticks[0]) / 100, float64(ticks[1]) / 100 // USER_HZ
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

// waitNoChildren waits (up to 30 s) until the processes pids have no child running.
func waitNoChildren(t *testing.T, pids []int) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		kids := 0
		procs, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, name := range procs {
			if b, err := os.ReadFile(name); err == nil {
				f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
				ppid, _ := strconv.Atoi(f[1])
				for _, p := range pids {
					if p == ppid {
						kids++
					}
				}
			}
		}
		if kids == 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the workers still have children after 30 s")
}

func statFields(t *testing.T, pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
}

// checkBench compares the job's output with a count of the files in Go.
func checkBench(t *testing.T, cl *client.Client, id string, files []string) {
	want := map[string]int{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			for _, w := range strings.Fields(sc.Text()) {
				want[w]++
			}
		}
		f.Close()
	}
	got := outputTSV(t, cl, id)
	sameCounts(t, "bench", got, want)
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
