package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

const scKeyed = "keyed"

// daskScript is the Dask word count, run from the repository's root as `make bench` does.
const daskScript = "scripts/dask_wordcount.py"

// Keyed is the keyed scenario: wordcount with "output":"blob" over corpora of 1M and 5M
// distinct words, against a single-process Go count and Dask on the 5M corpus, and `worker
// status` with ten 100 MB-result jobs listed.
type Keyed struct {
	Runs []KeyedRun `json:"runs"`
	// The figures of the biggest corpus, MB = 10^6 bytes.
	MBPerS float64 `json:"mb_per_s"`
	// The single-process counts (cmd wcount) over the same files on local disk: the fast one
	// (one goroutine a core) and the naive one; ratios are keyed ÷ count, wall and CPU-seconds.
	FastMBPerS    float64 `json:"fast_mb_per_s"`
	FastRatio     float64 `json:"fast_ratio"`
	FastCPURatio  float64 `json:"fast_cpu_ratio"`
	NaiveMBPerS   float64 `json:"naive_mb_per_s"`
	NaiveRatio    float64 `json:"naive_ratio"`
	NaiveCPURatio float64 `json:"naive_cpu_ratio"`
	DaskMBPerS    float64 `json:"dask_mb_per_s"`
	DaskRatio     float64 `json:"dask_ratio"`
	DaskError     string  `json:"dask_error,omitempty"`
	// RSSRatio is the leader's peak RSS at the most keys ÷ at the fewest (Runs: the worker's
	// default memory budget).
	RSSRatio float64 `json:"leader_rss_ratio"`
	// StatusS is `worker status` wall times (exec to exit) with ten 100 MB-result jobs stored.
	StatusS       []float64 `json:"status_s"`
	StatusMedianS float64   `json:"status_median_s"`
	// Commands reproduce each figure.
	Commands map[string]string `json:"commands"`
}

// KeyedRun is one keyed wordcount.
type KeyedRun struct {
	Keys          int     `json:"keys"`
	Budget        string  `json:"memory_budget"`
	Bytes         int64   `json:"bytes"`
	Blobs         int     `json:"blobs"`
	Job           string  `json:"job"`
	MakespanS     float64 `json:"makespan_s"`
	MBPerS        float64 `json:"mb_per_s"`
	LeaderPeakMiB float64 `json:"leader_peak_rss_mib"`
	WorkerPeakMiB float64 `json:"follower_peak_rss_mib"`
	OutputS       float64 `json:"output_read_s"` // client.WriteOutput of every record, checked
	Exact         bool    `json:"exact"`
	// CPUS is the CPU-seconds of the workers and this process (NATS) during the job.
	CPUS       float64 `json:"cpu_s"`
	FastS      float64 `json:"fast_s,omitempty"`
	FastCPUS   float64 `json:"fast_cpu_s,omitempty"`
	NaiveS     float64 `json:"naive_s,omitempty"`
	NaiveCPUS  float64 `json:"naive_cpu_s,omitempty"`
	DaskS      float64 `json:"dask_s,omitempty"`
	DaskPython string  `json:"dask_python,omitempty"`
}

// keyedSizes are the corpora's distinct words.
func keyedSizes(quick bool) []int {
	if quick {
		return []int{20_000, 100_000}
	}
	return []int{1_000_000, 5_000_000}
}

func (r *runner) keyed(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "keyed", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	k := &Keyed{Commands: map[string]string{
		"keyed wordcount and worker status": "go run ./cmd/loadtest --scenarios keyed",
		"single-process counts": "go build -o wcount ./internal/harness/corpus/wcount && ./wcount [-naive] -out FILE CORPUS_DIR " +
			"(fast: 4 MiB chunks at whitespace, one goroutine a core, open-addressing tables; naive: bufio, strings.FieldsFunc, a map; wall and CPU-seconds of the process)",
		"dask": strings.Join(corpus.DaskCommand("PYTHON", daskScript, "CORPUS_DIR", "OUT_DIR", 2), " ") +
			" (CORPUS_DIR: the 24 corpus blobs as local files, written by the scenario; PYTHON: the first of $DASK_PYTHON, /usr/bin/python3, python3 that imports dask, named in each run as dask_python)",
	}}
	r.mu.Lock()
	r.rep.Keyed = k
	r.mu.Unlock()
	sizes := keyedSizes(cfg.Quick)
	var corpora []*corpus.WordCorpus
	dir := filepath.Join(r.cfg.Dir, "keyed-corpus")
	defer os.RemoveAll(dir)
	for i, keys := range sizes {
		container := fmt.Sprintf("%s-kc%d", c.Options().Namespace, keys/1000)
		local := ""
		if i == len(sizes)-1 {
			local = dir // the baselines' input
		}
		r.log.Logf("keyed: writing a corpus of %d distinct words", keys)
		wc, err := corpus.WriteWordCorpus(ctx, c.Blob(), container, keys, 24, local)
		if err != nil {
			return fmt.Errorf("corpus of %d words: %w", keys, err)
		}
		defer func() { _, _ = c.Blob().DeleteContainer(context.WithoutCancel(ctx), container, nil) }()
		corpora = append(corpora, wc)
	}
	// At the worker's defaults: MB/s, and the baselines on the biggest corpus.
	for i, wc := range corpora {
		run, err := r.keyedRun(ctx, c, k, wc, i == len(corpora)-1)
		k.Runs = append(k.Runs, run)
		if err != nil {
			return err
		}
	}
	last := k.Runs[len(k.Runs)-1]
	k.MBPerS = last.MBPerS
	if last.FastS > 0 && last.NaiveS > 0 && last.CPUS > 0 {
		k.FastMBPerS = rig.Round3(float64(last.Bytes) / 1e6 / last.FastS)
		k.FastRatio = rig.Round3(last.FastS / last.MakespanS)
		k.FastCPURatio = rig.Round3(last.FastCPUS / last.CPUS)
		k.NaiveMBPerS = rig.Round3(float64(last.Bytes) / 1e6 / last.NaiveS)
		k.NaiveRatio = rig.Round3(last.NaiveS / last.MakespanS)
		k.NaiveCPURatio = rig.Round3(last.NaiveCPUS / last.CPUS)
	}
	if last.DaskS > 0 {
		k.DaskMBPerS = rig.Round3(float64(last.Bytes) / 1e6 / last.DaskS)
		k.DaskRatio = rig.Round3(k.MBPerS / k.DaskMBPerS)
	}
	// The leader's memory against the number of keys, at the default budget: the leader runs
	// tasks too, each within its share of the budget.
	if first := k.Runs[0]; first.LeaderPeakMiB > 0 {
		k.RSSRatio = rig.Round3(last.LeaderPeakMiB / first.LeaderPeakMiB)
	}
	return r.keyedStatus(ctx, c, k)
}

// keyedRun counts corpus keyed on c, checking every record; with baselines it runs the Go and
// Dask counts of the same corpus too.
func (r *runner) keyedRun(ctx context.Context, c *cluster.Cluster, k *Keyed, wc *corpus.WordCorpus, baselines bool) (KeyedRun, error) {
	run := KeyedRun{Keys: wc.Distinct, Budget: "default", Bytes: wc.Bytes, Blobs: wc.Blobs}
	cpu0 := rig.ClusterCPU(c)
	kw, err := rig.RunKeyedWordcount(ctx, c, wc, 3*r.cfg.JobTimeout)
	run.CPUS = rig.Round3((rig.ClusterCPU(c) - cpu0).Seconds())
	run.Job, run.LeaderPeakMiB, run.WorkerPeakMiB, run.OutputS = kw.ID, kw.LeaderPeakMiB, kw.FollowerPeakMiB, kw.OutputS
	if err != nil {
		return run, err
	}
	r.account(kw.Outcome)
	run.Exact = kw.Exact
	if kw.Makespan > 0 {
		run.MakespanS = rig.Round3(kw.Makespan.Seconds())
		run.MBPerS = rig.Round3(float64(run.Bytes) / 1e6 / kw.Makespan.Seconds())
	}
	r.log.Logf("keyed wordcount, %d keys, %.0f MB: %.2f s = %.1f MB/s, leader peak %.0f MiB, followers %.0f MiB, exact %v %s",
		run.Keys, float64(run.Bytes)/1e6, run.MakespanS, run.MBPerS, run.LeaderPeakMiB, run.WorkerPeakMiB, kw.Exact, kw.Problem)
	if !baselines {
		return run, nil
	}
	bin, err := r.wcount()
	if err != nil {
		return run, err
	}
	for _, naive := range []bool{false, true} {
		cr, err := wc.CountBaseline(ctx, bin, naive, r.cfg.Dir)
		if err != nil {
			return run, fmt.Errorf("single-process count: %w", err)
		}
		wall, cpu := rig.Round3(cr.Wall.Seconds()), rig.Round3(cr.CPU.Seconds())
		name := "fast"
		if naive {
			name, run.NaiveS, run.NaiveCPUS = "naive", wall, cpu
		} else {
			run.FastS, run.FastCPUS = wall, cpu
		}
		r.log.Logf("keyed: single-process %s count: %.2f s = %.1f MB/s, %.2f CPU-s (keyed: %.2f s, %.2f CPU-s)",
			name, wall, float64(run.Bytes)/1e6/wall, cpu, run.MakespanS, run.CPUS)
	}
	dr, err := wc.DaskBaseline(ctx, daskScript, 2, r.cfg.Dir)
	if err != nil {
		k.DaskError = err.Error()
		r.errorf("keyed: dask: %v", err)
		return run, nil
	}
	run.DaskS, run.DaskPython = dr.Seconds, dr.Python
	r.log.Logf("keyed: dask.bag, 2 processes (%s): %.2f s = %.1f MB/s", dr.Python, run.DaskS, float64(run.Bytes)/1e6/run.DaskS)
	return run, nil
}

// keyedStatus stores ten jobs with 100 MB results and times `worker status` (the list) on the
// idle cluster.
func (r *runner) keyedStatus(ctx context.Context, c *cluster.Cluster, k *Keyed) error {
	size := 100 << 20
	if r.cfg.Quick {
		size = 1 << 20
	}
	r.log.Logf("keyed: storing ten jobs with %d MiB results", size>>20)
	if _, err := rig.PutBigResultJobs(ctx, c, 10, size); err != nil {
		return fmt.Errorf("big results: %w", err)
	}
	xs, err := rig.TimeCommand(ctx, c, 7, "status")
	if err != nil {
		return err
	}
	k.StatusS = xs
	s := slices.Clone(xs)
	slices.Sort(s)
	k.StatusMedianS = s[len(s)/2]
	r.log.Logf("keyed: worker status with ten big-result jobs: median %.3f s (%v)", k.StatusMedianS, xs)
	return nil
}

// keyedTargets judges issue 19's targets.
func keyedTargets(cfg *Config, rep *Report) []Target {
	k := rep.Keyed
	if k == nil {
		return nil
	}
	speed := !cfg.Quick
	var ts []Target
	add := func(name, want string, value float64, unit string, met, judged bool, note string) {
		ts = append(ts, Target{Name: name, Want: want, Value: value, Unit: unit, Met: met, Judged: judged, Note: note})
	}
	add("keyed wordcount speed ÷ the fast single-process count, wall (issue 32, 5M keys)", "≥ 0.35", k.FastRatio, "×", k.FastRatio >= 0.35, speed && k.FastRatio > 0,
		fmt.Sprintf("%s vs %s MB/s; CPU-seconds ratio %s×", rig.Num(k.MBPerS), rig.Num(k.FastMBPerS), rig.Num(k.FastCPURatio)))
	add("keyed wordcount speed ÷ the naive single-process count, wall", "≥ 1", k.NaiveRatio, "×", k.NaiveRatio >= 1, speed && k.NaiveRatio > 0,
		fmt.Sprintf("%s vs %s MB/s; CPU-seconds ratio %s×", rig.Num(k.MBPerS), rig.Num(k.NaiveMBPerS), rig.Num(k.NaiveCPURatio)))
	if n := len(k.Runs); n > 1 {
		a, b := k.Runs[0], k.Runs[n-1]
		add(fmt.Sprintf("keyed leader peak RSS, %dk ÷ %dk keys", b.Keys/1000, a.Keys/1000), "0.9–1.1", k.RSSRatio, "×",
			k.RSSRatio >= 0.9 && k.RSSRatio <= 1.1, speed && k.RSSRatio > 0,
			fmt.Sprintf("%s vs %s MiB; the default memory budget, the leader runs tasks too", rig.Num(b.LeaderPeakMiB), rig.Num(a.LeaderPeakMiB)))
	}
	note := fmt.Sprintf("%s vs %s MB/s", rig.Num(k.MBPerS), rig.Num(k.DaskMBPerS))
	if k.DaskError != "" {
		note = "dask did not run: " + rig.Clip(k.DaskError, 120)
	}
	add("keyed wordcount MB/s ÷ Dask (dask.bag, 2 processes)", "≥ 3", k.DaskRatio, "×", k.DaskRatio >= 3, speed && k.DaskRatio > 0, note)
	add("worker status with ten 100 MB-result jobs, median", "< 0.2 s", k.StatusMedianS, " s", k.StatusMedianS > 0 && k.StatusMedianS < 0.2,
		speed && k.StatusMedianS > 0, "exec to exit, idle cluster")
	return ts
}

// keyedNotes are the commands behind the keyed figures.
func keyedNotes(rep *Report) []string {
	k := rep.Keyed
	if k == nil {
		return nil
	}
	names := slices.Sorted(maps.Keys(k.Commands))
	var out []string
	for _, n := range names {
		out = append(out, fmt.Sprintf("Keyed scenario, %s: `%s`.", n, k.Commands[n]))
	}
	return out
}

// writeKeyedFigures adds the scenario's rows to the figures table.
func writeKeyedFigures(row func(string, rig.Dist), rep *Report) {
	k := rep.Keyed
	if k == nil {
		return
	}
	for _, x := range k.Runs {
		at := fmt.Sprintf("keyed wordcount, %dk keys, budget %s", x.Keys/1000, x.Budget)
		row(fmt.Sprintf("%s, %.0f MB in %d blobs: MB/s", at, float64(x.Bytes)/1e6, x.Blobs), rig.Single(x.MBPerS, x.MBPerS > 0))
		row(at+": leader peak RSS MiB", rig.Single(x.LeaderPeakMiB, x.LeaderPeakMiB > 0))
		row(at+": follower peak RSS MiB", rig.Single(x.WorkerPeakMiB, x.WorkerPeakMiB > 0))
		row(at+": CPU-seconds (workers and NATS)", rig.Single(x.CPUS, x.CPUS > 0))
		row(at+": every record read back (client.WriteOutput), s", rig.Single(x.OutputS, x.OutputS > 0))
	}
	row("single-process fast word count (wcount, 2 goroutines): MB/s", rig.Single(k.FastMBPerS, k.FastMBPerS > 0))
	row("single-process naive word count (wcount -naive): MB/s", rig.Single(k.NaiveMBPerS, k.NaiveMBPerS > 0))
	row("Dask word count (dask.bag, 2 processes): MB/s", rig.Single(k.DaskMBPerS, k.DaskMBPerS > 0))
	row("worker status, ten 100 MB-result jobs: s", rig.Summarize(k.StatusS))
}

// wcount builds the single-process count into the run's folder once.
func (r *runner) wcount() (string, error) {
	if bin := filepath.Join(r.cfg.Dir, "wcount"); fileExists(bin) {
		return bin, nil
	}
	root, err := devserver.RepoRoot()
	if err != nil {
		return "", err
	}
	return cluster.BuildPackage(r.cfg.Dir, root, "./internal/harness/corpus/wcount", false)
}

func fileExists(name string) bool { _, err := os.Stat(name); return err == nil }
