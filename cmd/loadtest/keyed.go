package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

const (
	scKeyed       = "keyed"
	scKeyedLoaded = "keyed-loaded"
)

// daskScript is the Dask word count, run from the repository's root as `make bench` does.
const daskScript = "scripts/dask_wordcount.py"

// Keyed is the keyed scenarios (issue 32): keyed wordcount with "output":"blob" on a cluster at
// default settings over two corpora of one size, a small vocabulary (each word repeated) and a
// large one, judged against single-process counts of the same files on local disk in
// interleaved rounds (keyed, fast, naive); Dask on the large corpus; `worker status` with ten
// 100 MB-result jobs listed; and (keyed-loaded) the large corpus beside a CPU-bound job.
type Keyed struct {
	Corpora []KeyedCorpus `json:"corpora"`
	DaskS   float64       `json:"dask_s,omitempty"` // on the largest vocabulary
	// DaskMBPerS and DaskRatio: Dask's MB/s and the keyed job's median MB/s ÷ it.
	DaskMBPerS float64 `json:"dask_mb_per_s"`
	DaskRatio  float64 `json:"dask_ratio"`
	DaskPython string  `json:"dask_python,omitempty"`
	DaskError  string  `json:"dask_error,omitempty"`
	// RSSRatio is the leader's peak RSS at the most keys ÷ at the fewest (medians).
	RSSRatio float64 `json:"leader_rss_ratio"`
	// StatusS is `worker status` wall times (exec to exit) with ten 100 MB-result jobs stored.
	StatusS       []float64 `json:"status_s"`
	StatusMedianS float64   `json:"status_median_s"`
	// Loaded is the keyed-loaded scenario.
	Loaded *KeyedLoaded `json:"loaded,omitempty"`
	// Commands reproduce each figure.
	Commands map[string]string `json:"commands"`
}

// KeyedCorpus is one corpus's rounds and their medians. A ratio is the count's time ÷ the keyed
// job's, per round; above 1 the keyed job is faster. MB = 10^6 bytes.
type KeyedCorpus struct {
	Keys   int        `json:"keys"`
	Repeat int64      `json:"repeat"` // every word appears repeat × (1 + i%9) times
	Bytes  int64      `json:"bytes"`
	Blobs  int        `json:"blobs"`
	Rounds []KeyedRun `json:"rounds"`

	MBPerS        float64 `json:"mb_per_s"`      // the keyed job's, median
	KeyedCPUS     float64 `json:"keyed_cpu_s"`   // every process's CPU-seconds, median
	FastMBPerS    float64 `json:"fast_mb_per_s"` // the optimized count's, median
	FastCPUS      float64 `json:"fast_cpu_s"`
	FastRatio     float64 `json:"fast_ratio"`     // wall, median of the rounds
	FastCPURatio  float64 `json:"fast_cpu_ratio"` // CPU-seconds, median of the rounds
	NaiveMBPerS   float64 `json:"naive_mb_per_s"`
	NaiveCPUS     float64 `json:"naive_cpu_s"`
	NaiveRatio    float64 `json:"naive_ratio"`
	NaiveCPURatio float64 `json:"naive_cpu_ratio"`
	LeaderPeakMiB float64 `json:"leader_peak_rss_mib"` // median
}

// KeyedRun is one round: a keyed job, then the fast and the naive count of the same files.
type KeyedRun struct {
	Job           string             `json:"job"`
	MakespanS     float64            `json:"makespan_s"`
	MBPerS        float64            `json:"mb_per_s"`
	Exact         bool               `json:"exact"`
	LeaderPeakMiB float64            `json:"leader_peak_rss_mib"`
	WorkerPeakMiB float64            `json:"follower_peak_rss_mib"`
	PeakMiB       map[string]float64 `json:"peak_rss_mib"`  // every worker's
	OutputS       float64            `json:"output_read_s"` // client.WriteOutput of every record, checked
	CPU           CPUFigures         `json:"cpu_s"`         // of the keyed job, submit to finished
	FastS         float64            `json:"fast_s,omitempty"`
	FastCPUS      float64            `json:"fast_cpu_s,omitempty"`
	NaiveS        float64            `json:"naive_s,omitempty"`
	NaiveCPUS     float64            `json:"naive_cpu_s,omitempty"`
}

// CPUFigures is the CPU-seconds of every process during a job.
type CPUFigures struct {
	Workers  float64 `json:"workers"`
	Programs float64 `json:"programs,omitempty"` // the workers' child processes (program jobs)
	NATS     float64 `json:"nats_and_client"`    // this process: the in-process NATS server and the client
	Storage  float64 `json:"storage"`            // Azurite (0 when attached to a storage account)
	Total    float64 `json:"total"`
}

func cpuFigures(u rig.CPUUse) CPUFigures {
	return CPUFigures{Workers: rig.Round3(u.Workers.Seconds()), Programs: rig.Round3(u.Programs.Seconds()), NATS: rig.Round3(u.Self.Seconds()),
		Storage: rig.Round3(u.Storage.Seconds()), Total: rig.Round3(u.Total().Seconds())}
}

// keyed runs the keyed and keyed-loaded scenarios on one cluster at default settings, which
// holds the corpora for both.
func (r *runner) keyed(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "keyed", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	k := &Keyed{Commands: map[string]string{
		"keyed wordcount, single-process counts, worker status": "go run ./cmd/loadtest --scenarios keyed",
		"keyed wordcount beside a CPU-bound job":                "go run ./cmd/loadtest --scenarios keyed-loaded",
		"single-process counts": "go build -o wcount ./internal/harness/corpus/wcount && ./wcount [-naive] -out FILE CORPUS_DIR " +
			"(optimized: 4 MiB chunks at whitespace, one goroutine a core, open-addressing tables; naive: bufio, strings.FieldsFunc, a map; wall and CPU-seconds of the process)",
		"dask": strings.Join(corpus.DaskCommand("PYTHON", daskScript, "CORPUS_DIR", "OUT_DIR", 2), " ") +
			" (CORPUS_DIR: the corpus blobs as local files, written by the scenario; PYTHON: the first of $DASK_PYTHON, /usr/bin/python3, python3 that imports dask)",
	}}
	r.mu.Lock()
	r.rep.Keyed = k
	r.mu.Unlock()
	sizes := cfg.KeyedVocabularies
	if !cfg.has(scKeyed) {
		sizes = sizes[len(sizes)-1:] // keyed-loaded needs the largest only
	}
	// The largest first: the others are repeated to its size.
	corpora := make([]*corpus.WordCorpus, len(sizes))
	for i := len(sizes) - 1; i >= 0; i-- {
		keys := sizes[i]
		container := fmt.Sprintf("%s-kc%d", c.Options().Namespace, keys/1000)
		dir := filepath.Join(r.cfg.Dir, fmt.Sprintf("keyed-corpus-%d", keys))
		defer os.RemoveAll(dir)
		r.log.Logf("keyed: writing a corpus of %d distinct words", keys)
		var wc *corpus.WordCorpus
		if i == len(sizes)-1 {
			wc, err = corpus.WriteWordCorpus(ctx, c.Blob(), container, keys, 24, dir)
		} else {
			wc, err = corpus.WriteWordCorpusSized(ctx, c.Blob(), container, keys, 24, corpora[len(sizes)-1].Bytes, dir)
		}
		if err != nil {
			return fmt.Errorf("corpus of %d words: %w", keys, err)
		}
		defer func() { _, _ = c.Blob().DeleteContainer(context.WithoutCancel(ctx), container, nil) }()
		corpora[i] = wc
	}
	if cfg.has(scKeyed) {
		if err := r.keyedRounds(ctx, c, k, corpora); err != nil {
			return err
		}
	}
	if cfg.has(scKeyedLoaded) {
		if err := r.keyedLoaded(ctx, c, k, corpora[len(corpora)-1]); err != nil {
			return err
		}
	}
	if cfg.has(scKeyed) {
		return r.keyedStatus(ctx, c, k)
	}
	return nil
}

// keyedRounds runs KeyedRounds rounds over every corpus, each a keyed job then the fast and the
// naive count, and Dask once on the largest.
func (r *runner) keyedRounds(ctx context.Context, c *cluster.Cluster, k *Keyed, corpora []*corpus.WordCorpus) error {
	bin, err := r.buildTool("wcount", "./internal/harness/corpus/wcount")
	if err != nil {
		return err
	}
	for _, wc := range corpora {
		kc := KeyedCorpus{Keys: wc.Distinct, Repeat: wc.Repeat, Bytes: wc.Bytes, Blobs: wc.Blobs}
		for round := range r.cfg.KeyedRounds {
			run, err := r.keyedRun(ctx, c, wc)
			if err != nil {
				kc.Rounds = append(kc.Rounds, run)
				k.Corpora = append(k.Corpora, kc)
				return err
			}
			for _, naive := range []bool{false, true} {
				cr, err := wc.CountBaseline(ctx, bin, naive, r.cfg.Dir)
				if err != nil {
					return fmt.Errorf("single-process count: %w", err)
				}
				wall, cpu := rig.Round3(cr.Wall.Seconds()), rig.Round3(cr.CPU.Seconds())
				name := "optimized"
				if naive {
					name, run.NaiveS, run.NaiveCPUS = "naive", wall, cpu
				} else {
					run.FastS, run.FastCPUS = wall, cpu
				}
				r.log.Logf("keyed %dk words, round %d: single-process %s count: %.2f s = %.1f MB/s, %.2f CPU-s (keyed: %.2f s, %.2f CPU-s)",
					wc.Distinct/1000, round+1, name, wall, float64(wc.Bytes)/1e6/wall, cpu, run.MakespanS, run.CPU.Total)
			}
			kc.Rounds = append(kc.Rounds, run)
		}
		kc.summarize()
		k.Corpora = append(k.Corpora, kc)
	}
	last := &k.Corpora[len(k.Corpora)-1]
	if first := k.Corpora[0]; first.LeaderPeakMiB > 0 && len(k.Corpora) > 1 {
		k.RSSRatio = rig.Round3(last.LeaderPeakMiB / first.LeaderPeakMiB)
	}
	dr, err := corpora[len(corpora)-1].DaskBaseline(ctx, daskScript, 2, r.cfg.Dir)
	if err != nil {
		k.DaskError = err.Error()
		r.errorf("keyed: dask: %v", err)
		return nil
	}
	k.DaskS, k.DaskPython = dr.Seconds, dr.Python
	k.DaskMBPerS = rig.Round3(float64(last.Bytes) / 1e6 / dr.Seconds)
	k.DaskRatio = rig.Round3(last.MBPerS / k.DaskMBPerS)
	r.log.Logf("keyed: dask.bag, 2 processes (%s): %.2f s = %.1f MB/s", dr.Python, dr.Seconds, k.DaskMBPerS)
	return nil
}

// summarize sets the medians of the rounds that ended exact.
func (kc *KeyedCorpus) summarize() {
	var mbs, kcpu, fast, fcpu, naive, ncpu, fr, fcr, nr, ncr, lpeak []float64
	mb := float64(kc.Bytes) / 1e6
	for _, x := range kc.Rounds {
		if !x.Exact || x.MakespanS <= 0 || x.FastS <= 0 || x.NaiveS <= 0 {
			continue
		}
		mbs, kcpu, lpeak = append(mbs, x.MBPerS), append(kcpu, x.CPU.Total), append(lpeak, x.LeaderPeakMiB)
		fast, fcpu = append(fast, mb/x.FastS), append(fcpu, x.FastCPUS)
		naive, ncpu = append(naive, mb/x.NaiveS), append(ncpu, x.NaiveCPUS)
		fr, nr = append(fr, x.FastS/x.MakespanS), append(nr, x.NaiveS/x.MakespanS)
		if x.CPU.Total > 0 {
			fcr, ncr = append(fcr, x.FastCPUS/x.CPU.Total), append(ncr, x.NaiveCPUS/x.CPU.Total)
		}
	}
	kc.MBPerS, kc.KeyedCPUS, kc.LeaderPeakMiB = median(mbs), median(kcpu), median(lpeak)
	kc.FastMBPerS, kc.FastCPUS, kc.NaiveMBPerS, kc.NaiveCPUS = median(fast), median(fcpu), median(naive), median(ncpu)
	kc.FastRatio, kc.FastCPURatio, kc.NaiveRatio, kc.NaiveCPURatio = median(fr), median(fcr), median(nr), median(ncr)
}

// median is the median of xs rounded to 3 decimals (the mean of the middle two of an even
// count), 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return rig.Round3(m)
}

// keyedRun counts corpus keyed on c, checking every record, with the CPU of every process from
// submit to finished.
func (r *runner) keyedRun(ctx context.Context, c *cluster.Cluster, wc *corpus.WordCorpus) (KeyedRun, error) {
	cpu0 := r.rig.CPU(c)
	var cpu rig.CPUUse
	kw, err := rig.RunKeyed(ctx, c, keyedWordcountJob(wc), func(ctx context.Context, id string) error {
		cpu = r.rig.CPU(c).Sub(cpu0) // before reading the output back
		return wc.CheckOutput(ctx, c.Client, id)
	}, 3*r.cfg.JobTimeout)
	if cpu == (rig.CPUUse{}) {
		cpu = r.rig.CPU(c).Sub(cpu0)
	}
	run := KeyedRun{Job: kw.ID, LeaderPeakMiB: kw.LeaderPeakMiB, WorkerPeakMiB: kw.FollowerPeakMiB, PeakMiB: kw.Peaks, OutputS: kw.OutputS, CPU: cpuFigures(cpu)}
	if err != nil {
		return run, err
	}
	r.account(kw.Outcome)
	run.Exact = kw.Exact
	if kw.Makespan > 0 {
		run.MakespanS = rig.Round3(kw.Makespan.Seconds())
		run.MBPerS = rig.Round3(float64(wc.Bytes) / 1e6 / kw.Makespan.Seconds())
	}
	r.log.Logf("keyed wordcount, %d keys, %.0f MB: %.2f s = %.1f MB/s, CPU-s %.1f (workers %.1f, NATS and client %.1f, storage %.1f), leader peak %.0f MiB, followers %.0f MiB, exact %v %s",
		wc.Distinct, float64(wc.Bytes)/1e6, run.MakespanS, run.MBPerS, run.CPU.Total, run.CPU.Workers, run.CPU.NATS, run.CPU.Storage,
		run.LeaderPeakMiB, run.WorkerPeakMiB, kw.Exact, kw.Problem)
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
	k.StatusMedianS = median(xs)
	r.log.Logf("keyed: worker status with ten big-result jobs: median %.3f s (%v)", k.StatusMedianS, xs)
	return nil
}

// keyedTargets judges issue 19's and issue 32's keyed targets.
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
	for i, kc := range k.Corpora {
		want := 0.35 // the largest vocabulary (issue 32: 5M words)
		if i < len(k.Corpora)-1 {
			want = 0.5 // a small one, repeated (issue 32: 50k words)
		}
		at := fmt.Sprintf("%dk distinct words, %.0f MB", kc.Keys/1000, float64(kc.Bytes)/1e6)
		add(fmt.Sprintf("keyed wordcount ÷ the optimized single-process count, wall, median of %d interleaved rounds (issue 32, %s)", len(kc.Rounds), at),
			fmt.Sprintf("≥ %.2f", want), kc.FastRatio, "×", kc.FastRatio >= want, speed && kc.FastRatio > 0,
			fmt.Sprintf("%s vs %s MB/s; CPU-seconds ratio %s× (%s vs %s CPU-s, every process)", rig.Num(kc.MBPerS), rig.Num(kc.FastMBPerS),
				rig.Num(kc.FastCPURatio), rig.Num(kc.FastCPUS), rig.Num(kc.KeyedCPUS)))
		add(fmt.Sprintf("keyed wordcount ÷ the naive single-process count, wall (%s)", at), "≥ 1", kc.NaiveRatio, "×", kc.NaiveRatio >= 1, speed && kc.NaiveRatio > 0,
			fmt.Sprintf("%s vs %s MB/s; CPU-seconds ratio %s×", rig.Num(kc.MBPerS), rig.Num(kc.NaiveMBPerS), rig.Num(kc.NaiveCPURatio)))
	}
	if n := len(k.Corpora); n > 1 {
		a, b := k.Corpora[0], k.Corpora[n-1]
		add(fmt.Sprintf("keyed leader peak RSS, %dk ÷ %dk keys", b.Keys/1000, a.Keys/1000), "0.9–1.1", k.RSSRatio, "×",
			k.RSSRatio >= 0.9 && k.RSSRatio <= 1.1, speed && k.RSSRatio > 0,
			fmt.Sprintf("%s vs %s MiB; the default memory budget, the leader runs tasks too", rig.Num(b.LeaderPeakMiB), rig.Num(a.LeaderPeakMiB)))
	}
	if len(k.Corpora) > 0 {
		note := fmt.Sprintf("%s vs %s MB/s", rig.Num(k.Corpora[len(k.Corpora)-1].MBPerS), rig.Num(k.DaskMBPerS))
		if k.DaskError != "" {
			note = "dask did not run: " + rig.Clip(k.DaskError, 120)
		}
		add("keyed wordcount MB/s ÷ Dask (dask.bag, 2 processes)", "≥ 3", k.DaskRatio, "×", k.DaskRatio >= 3, speed && k.DaskRatio > 0, note)
	}
	if k.StatusS != nil {
		add("worker status with ten 100 MB-result jobs, median", "< 0.2 s", k.StatusMedianS, " s", k.StatusMedianS > 0 && k.StatusMedianS < 0.2,
			speed && k.StatusMedianS > 0, "exec to exit, idle cluster")
	}
	return append(ts, keyedLoadedTargets(cfg, k.Loaded)...)
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
	for _, kc := range k.Corpora {
		at := fmt.Sprintf("keyed wordcount, %dk distinct words, %.0f MB in %d blobs", kc.Keys/1000, float64(kc.Bytes)/1e6, kc.Blobs)
		var mbs, cpu, w, nats, st, fast, fcpu, naive, ncpu, lpeak, fpeak []float64
		for _, x := range kc.Rounds {
			if !x.Exact {
				continue
			}
			mbs, cpu, w, nats, st = append(mbs, x.MBPerS), append(cpu, x.CPU.Total), append(w, x.CPU.Workers), append(nats, x.CPU.NATS), append(st, x.CPU.Storage)
			lpeak, fpeak = append(lpeak, x.LeaderPeakMiB), append(fpeak, x.WorkerPeakMiB)
			if x.FastS > 0 {
				fast, fcpu = append(fast, x.FastS), append(fcpu, x.FastCPUS)
			}
			if x.NaiveS > 0 {
				naive, ncpu = append(naive, x.NaiveS), append(ncpu, x.NaiveCPUS)
			}
		}
		row(at+": MB/s", rig.Summarize(mbs))
		row(at+": CPU-seconds, every process", rig.Summarize(cpu))
		row(at+": CPU-seconds of the workers", rig.Summarize(w))
		row(at+": CPU-seconds of NATS and the client (this process)", rig.Summarize(nats))
		row(at+": CPU-seconds of the storage emulator", rig.Summarize(st))
		row(at+": leader peak RSS MiB", rig.Summarize(lpeak))
		row(at+": follower peak RSS MiB", rig.Summarize(fpeak))
		row(at+": optimized single-process count (wcount, one goroutine a core), s", rig.Summarize(fast))
		row(at+": optimized single-process count, CPU-seconds", rig.Summarize(fcpu))
		row(at+": naive single-process count (wcount -naive), s", rig.Summarize(naive))
		row(at+": naive single-process count, CPU-seconds", rig.Summarize(ncpu))
		row(at+": keyed ÷ optimized, wall", rig.Single(kc.FastRatio, kc.FastRatio > 0))
		row(at+": keyed ÷ optimized, CPU-seconds", rig.Single(kc.FastCPURatio, kc.FastCPURatio > 0))
		row(at+": keyed ÷ naive, wall", rig.Single(kc.NaiveRatio, kc.NaiveRatio > 0))
		row(at+": keyed ÷ naive, CPU-seconds", rig.Single(kc.NaiveCPURatio, kc.NaiveCPURatio > 0))
	}
	row("Dask word count (dask.bag, 2 processes): MB/s", rig.Single(k.DaskMBPerS, k.DaskMBPerS > 0))
	row("worker status, ten 100 MB-result jobs: s", rig.Summarize(k.StatusS))
	writeKeyedLoadedFigures(row, k.Loaded)
}

// keyedWordcountJob is wordcount with "output":"blob" over wc, every other parameter at its
// default (shards of 8 MiB, the cluster's partitions).
func keyedWordcountJob(wc *corpus.WordCorpus) knownjobs.Job {
	p, _ := json.Marshal(map[string]any{"container": wc.Container, "prefix": "corpus/", "output": "blob"})
	return knownjobs.Job{Type: "wordcount", Params: p, Check: rig.ManifestOf(int64(wc.Distinct))}
}

// buildTool builds a harness command (pkg) into the run's folder once.
func (r *runner) buildTool(name, pkg string) (string, error) {
	if bin := filepath.Join(r.cfg.Dir, name); fileExists(bin) {
		return bin, nil
	}
	root, err := devserver.RepoRoot()
	if err != nil {
		return "", err
	}
	return cluster.BuildPackage(r.cfg.Dir, root, pkg, false)
}

func fileExists(name string) bool { _, err := os.Stat(name); return err == nil }
