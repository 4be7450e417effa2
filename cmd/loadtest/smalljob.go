package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// smallJob is issue 12's latency figure: primes below 2·10^7 in 200 shards, submit to finished.
// It runs on an idle cluster at default settings; the median of SmallJobRuns counts.
func (r *runner) smallJob(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "small", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	job := knownjobs.Primes(20_000_000, 200)
	sj := &SmallJob{}
	var spans, planned []float64
	// One warm-up job: the first job of a cluster creates its consumers.
	if _, err := r.runJob(ctx, c, job, "small job (warm-up)", 200); err != nil {
		return err
	}
	for i := range cfg.SmallJobRuns {
		time.Sleep(300 * time.Millisecond) // idle: the previous job's last checkpoint and acks are done
		o, err := r.runJob(ctx, c, job, fmt.Sprintf("small job %d/%d", i+1, cfg.SmallJobRuns), 200)
		if err != nil {
			return err
		}
		sj.Runs++
		if o.Exact {
			sj.Exact++
			spans = append(spans, rig.Round3(o.Makespan.Seconds()))
			if p := rig.PlannedAt(c, o.ID); !p.IsZero() {
				planned = append(planned, rig.Round3(p.Sub(o.Start).Seconds()))
			}
		}
	}
	sj.Makespan, sj.Planned = rig.Summarize(spans), rig.Summarize(planned)
	sj.MedianS = sj.Makespan.P50
	r.rep.SmallJob = sj
	r.log.Logf("small job: primes below 2·10^7 in 200 shards: submit→finished p50 %.3fs, p90 %.3fs (%d of %d exact)", sj.Makespan.P50, sj.Makespan.P90, sj.Exact, sj.Runs)
	return nil
}
