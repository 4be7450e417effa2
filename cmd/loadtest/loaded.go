package main

import (
	"context"
	"fmt"
	"runtime"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// loaded is issue 11's no-fault run under load: CPU-bound jobs back to back on a cluster at
// default settings for LoadedDuration, with nothing killed. Every new term, every lease break is
// a takeover of a live leader.
func (r *runner) loaded(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "load", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	ld := &report.Loaded{}
	r.rep.Loaded = ld
	// About 10 s of CPU per job on two cores (a tenth of it in short runs, so the last job does
	// not outlast the run by much).
	samples := int64(2_000_000_000)
	if cfg.LoadedDuration < time.Minute {
		samples /= 10
	}
	job := knownjobs.MonteCarloPi(samples, 400)
	start := time.Now()
	lw := rig.WatchLease(ctx, c)
	cpu0 := rig.ClusterCPU(c)
	r.log.Phase(fmt.Sprintf("loaded no-fault run (%v)", cfg.LoadedDuration), int(cfg.LoadedDuration.Seconds()))
	// Three jobs in flight at once, so one's planning and finishing never leaves the cores idle.
	firstErr := rig.KeepRunning(ctx, c, job, 3, start.Add(cfg.LoadedDuration), cfg.JobTimeout, func(o rig.Outcome, err error) {
		r.log.Set(int(time.Since(start).Seconds()))
		if err != nil {
			r.log.Logf("loaded run: %v", err)
			return
		}
		r.account(o)
		ld.Jobs++
		if o.Exact {
			ld.Exact++
		}
	})
	r.log.Done()
	end := time.Now()
	cpu := rig.ClusterCPU(c) - cpu0
	terms := lw.Stop()
	ld.DurationS = rig.Round3(end.Sub(start).Seconds())
	ld.CPUBusy = rig.Round3(cpu.Seconds() / (float64(runtime.NumCPU()) * end.Sub(start).Seconds()))
	time.Sleep(200 * time.Millisecond) // the last events on their way
	ld.Elections = rig.Changes(c, terms, start, end)
	ld.BrokeLeases = rig.CountEvents(c, string(election.EventBrokeLease), start, end, 0)
	ld.Suspected = rig.CountEvents(c, string(election.EventSuspected), start, end, 0)
	r.log.Logf("loaded run: %.0fs, %d pi jobs (%d exact), CPU busy %.0f%%: %d leader changes, %d lease breaks, %d suspicions",
		ld.DurationS, ld.Jobs, ld.Exact, 100*ld.CPUBusy, ld.Elections, ld.BrokeLeases, ld.Suspected)
	return firstErr
}
