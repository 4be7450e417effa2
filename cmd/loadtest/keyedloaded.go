package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/corpus"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// KeyedLoaded is issue 32's first "done when": the largest corpus keyed at default settings,
// KeyedLoadedRuns times, each with CPU-bound pi jobs running beside it on the same cluster.
type KeyedLoaded struct {
	Runs  []KeyedLoadedRun `json:"runs"`
	Exact int              `json:"exact"`
	// LeaderChanges is the sum over the runs; MaxPeakMiB the largest peak RSS of any worker.
	LeaderChanges int     `json:"leader_changes"`
	MaxPeakMiB    float64 `json:"max_worker_peak_rss_mib"`
}

// KeyedLoadedRun is one keyed job beside the CPU-bound jobs.
type KeyedLoadedRun struct {
	KeyedRun
	LeaderChanges int `json:"leader_changes"`
	PiJobs        int `json:"pi_jobs"`       // CPU-bound jobs that ran beside it
	PiExact       int `json:"pi_jobs_exact"` // of them, ended exact
}

// keyedLoaded runs the keyed wordcount of wc KeyedLoadedRuns times, each beside a stream of pi
// jobs (one at a time, about 10 CPU-seconds each), and counts leader changes and every worker's
// peak RSS.
func (r *runner) keyedLoaded(ctx context.Context, c *cluster.Cluster, k *Keyed, wc *corpus.WordCorpus) error {
	kl := &KeyedLoaded{}
	k.Loaded = kl
	samples := int64(2_000_000_000)
	if r.cfg.Quick {
		samples /= 20
	}
	pi := knownjobs.MonteCarloPi(samples, 400)
	for i := range r.cfg.KeyedLoadedRuns {
		bctx, stopPi := context.WithCancel(ctx)
		var wg sync.WaitGroup
		var piJobs, piExact int
		wg.Add(1)
		go func() { // the job beside it: pi jobs back to back until the keyed job ends
			defer wg.Done()
			for bctx.Err() == nil {
				id, start, err := rig.Submit(bctx, c, pi)
				if err != nil {
					return
				}
				o, err := rig.Await(bctx, c, pi, id, start, r.cfg.JobTimeout, nil)
				if err != nil {
					_, _ = c.Client.Cancel(context.WithoutCancel(ctx), id)
					return
				}
				r.account(o)
				piJobs++
				if o.Exact {
					piExact++
				}
			}
		}()
		_ = rig.Sleep(ctx, 2*time.Second) // the pi job is running
		from := time.Now()
		lw := rig.WatchLease(ctx, c)
		run, err := r.keyedRun(ctx, c, wc)
		terms := lw.Stop()
		to := time.Now()
		stopPi()
		wg.Wait()
		time.Sleep(200 * time.Millisecond) // the last events on their way
		lr := KeyedLoadedRun{KeyedRun: run, LeaderChanges: rig.Changes(c, terms, from, to), PiJobs: piJobs, PiExact: piExact}
		kl.Runs = append(kl.Runs, lr)
		kl.LeaderChanges += lr.LeaderChanges
		if run.Exact {
			kl.Exact++
		}
		for _, p := range run.PeakMiB {
			kl.MaxPeakMiB = max(kl.MaxPeakMiB, p)
		}
		r.log.Logf("keyed beside pi jobs, run %d/%d: exact %v, %d leader changes, peak RSS %s MiB, %d pi jobs beside it (%d exact)",
			i+1, r.cfg.KeyedLoadedRuns, run.Exact, lr.LeaderChanges, peaksText(run.PeakMiB), piJobs, piExact)
		if err != nil {
			return err
		}
	}
	return nil
}

// peaksText lists peaks by worker id.
func peaksText(peaks map[string]float64) string {
	ids := make([]string, 0, len(peaks))
	for id := range peaks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for _, id := range ids {
		parts = append(parts, fmt.Sprintf("%s %s", id, rig.Num(peaks[id])))
	}
	return strings.Join(parts, ", ")
}

// keyedLoadedTargets judges the keyed-loaded scenario.
func keyedLoadedTargets(cfg *Config, kl *KeyedLoaded) []Target {
	if kl == nil {
		return nil
	}
	n := len(kl.Runs)
	return []Target{
		{Name: fmt.Sprintf("keyed wordcount beside a CPU-bound job, largest corpus, default settings: exact runs of %d", cfg.KeyedLoadedRuns),
			Want: fmt.Sprintf("%d of %d", cfg.KeyedLoadedRuns, cfg.KeyedLoadedRuns), Value: float64(kl.Exact), Unit: fmt.Sprintf(" of %d", n),
			Met: kl.Exact == cfg.KeyedLoadedRuns, Judged: true},
		{Name: "keyed wordcount beside a CPU-bound job: leader changes", Want: "0", Value: float64(kl.LeaderChanges), Unit: "",
			Met: kl.LeaderChanges == 0, Judged: n > 0, Note: fmt.Sprintf("%d runs", n)},
		{Name: "keyed wordcount beside a CPU-bound job: every worker's peak RSS", Want: "≤ 300 MiB", Value: kl.MaxPeakMiB, Unit: " MiB",
			Met: kl.MaxPeakMiB > 0 && kl.MaxPeakMiB <= 300, Judged: !cfg.Quick && kl.MaxPeakMiB > 0, Note: "the largest of any worker in any run"},
	}
}

// writeKeyedLoadedFigures adds the keyed-loaded rows to the figures table.
func writeKeyedLoadedFigures(row func(string, rig.Dist), kl *KeyedLoaded) {
	if kl == nil {
		return
	}
	var s, cpu, peaks, changes []float64
	for _, x := range kl.Runs {
		if x.MakespanS > 0 {
			s, cpu = append(s, x.MakespanS), append(cpu, x.CPU.Total)
		}
		changes = append(changes, float64(x.LeaderChanges))
		peaks = append(peaks, slices.Collect(maps.Values(x.PeakMiB))...)
	}
	row("keyed wordcount beside a CPU-bound job: s", rig.Summarize(s))
	row("keyed wordcount beside a CPU-bound job: CPU-seconds, every process (the pi jobs' included)", rig.Summarize(cpu))
	row("keyed wordcount beside a CPU-bound job: leader changes a run", rig.Summarize(changes))
	row("keyed wordcount beside a CPU-bound job: peak RSS of each worker, MiB", rig.Summarize(peaks))
}
