package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// scScale is issue 24's scenario: idle cost against cluster size, takeover against cluster
// size, and a burst of tiny jobs.
const scScale = "scale"

// Scale is the scale scenario's report.
type Scale struct {
	Idle     []rig.Idle     `json:"idle"`
	Takeover []rig.Takeover `json:"takeover"`
	Intake   *rig.Intake    `json:"intake,omitempty"`
}

// scaleSettle lets a fresh cluster's start-up traffic (consumers, first checkpoints) pass.
const scaleSettle = 5 * time.Second

// scale starts a cluster of each size in cfg.ScaleWorkers, one at a time: it measures it idle,
// SIGKILLs its leader cfg.ScaleKills times and times each takeover; the smallest cluster then takes in
// cfg.ScaleJobs one-shard jobs from 8 submitters.
func (r *runner) scale(ctx context.Context) error {
	cfg := r.cfg
	sc := &Scale{}
	defer func() {
		r.mu.Lock()
		r.rep.Scale = sc
		r.mu.Unlock()
	}()
	window, settle := 10*time.Second, scaleSettle
	if cfg.Quick {
		window, settle = 2*time.Second, time.Second
	}
	for i, n := range cfg.ScaleWorkers {
		c, err := r.rig.Start(ctx, rig.Spec{Name: fmt.Sprintf("scale%d", n), Workers: n, LeaseDuration: cfg.LeaseDuration})
		if err != nil {
			return err
		}
		if err := rig.Sleep(ctx, settle); err != nil {
			r.rig.Stop(c)
			return err
		}
		idle, err := r.rig.MeasureIdle(ctx, c, window, runtime.NumCPU())
		if err != nil {
			r.rig.Stop(c)
			return err
		}
		sc.Idle = append(sc.Idle, idle)
		r.log.Logf("scale: %d idle workers: %.1f %% of the machine (workers %.1f, azurite %.1f, nats+observers %.1f), %.0f NATS msgs/s (%.1f per worker)",
			n, idle.MachinePct, idle.WorkersPct, idle.AzuritePct, idle.SelfPct, idle.NATSMsgsPerS, idle.NATSMsgsPerWorkerPerS)
		if i == 0 && cfg.ScaleJobs > 0 {
			in, err := r.rig.BurstIntake(ctx, c, cfg.ScaleJobs, 8, cfg.JobTimeout, runtime.NumCPU())
			if err != nil {
				r.rig.Stop(c)
				return err
			}
			sc.Intake = &in
			r.mu.Lock()
			r.rep.Jobs += in.Jobs
			r.rep.WrongResults += in.Jobs - in.Exact
			r.rep.Errors = append(r.rep.Errors, in.Problems...)
			r.mu.Unlock()
			r.log.Logf("scale: %d one-shard jobs from 8 submitters on %d workers: submitted in %.2fs, last finished %.2fs after the last submit, %.1f jobs/s, latency p50 %.2fs (submit→started %.2fs, started→finished %.2fs; CPU workers %.1f %%, azurite %.1f %%, submitters+nats %.1f %%) (%d exact)",
				in.Jobs, n, in.SubmitS, in.LastAfterS, in.JobsPerS, in.Latency.P50, in.Wait.P50, in.Run.P50, in.WorkersPct, in.AzuritePct, in.SelfPct, in.Exact)
		}
		for k := 1; k <= cfg.ScaleKills; k++ {
			to, err := rig.KillAndTime(ctx, c, 30*time.Second)
			if err != nil {
				r.rig.Stop(c)
				return err
			}
			to.Workers = n
			sc.Takeover = append(sc.Takeover, to)
			r.log.Logf("scale: %d workers, SIGKILL %d of the leader: new leader in %.3fs (%d lease breaks)", n, k, to.S, to.Breaks)
			_ = rig.Sleep(ctx, 2*time.Second)
		}
		r.rig.Stop(c)
	}
	return nil
}

// writeScale is the scale section of the Markdown summary.
func writeScale(w io.Writer, sc *Scale) {
	if sc == nil {
		return
	}
	fmt.Fprintf(w, "\n### Scale\n\n| workers | idle CPU, %% of machine | workers %% | azurite %% | NATS+observers %% | NATS msgs/s | per worker/s |\n|---|---|---|---|---|---|---|\n")
	for _, x := range sc.Idle {
		fmt.Fprintf(w, "| %d | %.1f | %.1f | %.1f | %.1f | %.0f | %.1f |\n", x.Workers, x.MachinePct, x.WorkersPct, x.AzuritePct, x.SelfPct, x.NATSMsgsPerS, x.NATSMsgsPerWorkerPerS)
	}
	fmt.Fprintf(w, "\n| workers | SIGKILL → new leader s | lease breaks |\n|---|---|---|\n")
	for _, t := range sc.Takeover {
		fmt.Fprintf(w, "| %d | %.3f | %d |\n", t.Workers, t.S, t.Breaks)
	}
	if in := sc.Intake; in != nil {
		fmt.Fprintf(w, "\n%d one-shard jobs from %d submitters: submitted in %.2f s; the last finished %.2f s after the last submit; %.1f jobs/s; latency p50 %.2f s, p90 %.2f s (submit→started p50 %.2f s, started→finished p50 %.2f s); CPU meanwhile: workers %.1f %%, Azurite %.1f %%, submitters and NATS %.1f %% of the machine; %d exact.\n",
			in.Jobs, in.Submitters, in.SubmitS, in.LastAfterS, in.JobsPerS, in.Latency.P50, in.Latency.P90, in.Wait.P50, in.Run.P50, in.WorkersPct, in.AzuritePct, in.SelfPct, in.Exact)
	}
}

// scaleTakeovers are the SIGKILL takeover times of each cluster size, in seconds.
func scaleTakeovers(sc *Scale) map[int][]float64 {
	by := map[int][]float64{}
	for _, t := range sc.Takeover {
		by[t.Workers] = append(by[t.Workers], t.S)
	}
	return by
}

// scaleTargets judges issue 24's targets: 60 idle workers cost at most 15 % of the machine; a
// SIGKILLed leader of any size is replaced within 2 s, and the median takeover of a larger
// cluster is within 10 % of the smallest's (a median of several kills: one kill's time moves by
// the watcher's probe period); the burst's last job ends within 3 s of the last submit.
func scaleTargets(cfg *Config, rep *Report) []Target {
	sc := rep.Scale
	if sc == nil {
		return nil
	}
	speed := !cfg.Quick
	var ts []Target
	add := func(name, want string, value float64, unit string, met, judged bool, note string) {
		ts = append(ts, Target{Name: name, Want: want, Value: value, Unit: unit, Met: met, Judged: judged, Note: note})
	}
	for _, x := range sc.Idle {
		if x.Workers == 60 {
			add("60 idle workers with NATS and Azurite: CPU", "≤ 15 % of the machine", x.MachinePct, " %", x.MachinePct <= 15, speed,
				fmt.Sprintf("workers %.1f %%, Azurite %.1f %%, NATS and the load test %.1f %%; %.1f NATS messages a worker a second",
					x.WorkersPct, x.AzuritePct, x.SelfPct, x.NATSMsgsPerWorkerPerS))
		}
	}
	by := scaleTakeovers(sc)
	sizes := slices.Sorted(maps.Keys(by))
	if len(sizes) > 0 {
		base := rig.Summarize(by[sizes[0]])
		for _, n := range sizes {
			d := rig.Summarize(by[n])
			add(fmt.Sprintf("SIGKILL of the leader → new leader, %d workers, slowest of %d", n, d.N), "< 2 s", d.Max, " s", d.Max < 2, true,
				fmt.Sprintf("median %.3f s", d.P50))
			if n == sizes[0] || base.P50 <= 0 {
				continue
			}
			ratio := rig.Round3(d.P50 / base.P50)
			add(fmt.Sprintf("SIGKILL takeover median, %d ÷ %d workers", n, sizes[0]), "≤ 1.10", ratio, "×", ratio <= 1.10, speed && d.N >= 3 && base.N >= 3,
				fmt.Sprintf("%.3f s vs %.3f s, %d kills each", d.P50, base.P50, min(d.N, base.N)))
		}
	}
	if in := sc.Intake; in != nil {
		add(fmt.Sprintf("%d one-shard jobs from %d submitters: the last ends after the last submit", in.Jobs, in.Submitters), "≤ 3 s", in.LastAfterS, " s",
			in.LastAfterS <= 3 && in.Exact == in.Jobs, speed && in.Jobs >= 300, fmt.Sprintf("%d of %d exact; %.1f jobs/s", in.Exact, in.Jobs, in.JobsPerS))
	}
	return ts
}
