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
	const inFlight = 3
	type res struct {
		o   rig.Outcome
		err error
	}
	results := make(chan res, inFlight)
	inflight := 0
	launch := func() {
		inflight++
		go func() {
			id, st, err := rig.Submit(ctx, c, job)
			if err != nil {
				results <- res{err: err}
				return
			}
			o, err := rig.Await(ctx, c, job, id, st, cfg.JobTimeout, nil)
			results <- res{o, err}
		}()
	}
	var firstErr error
	for {
		for inflight < inFlight && time.Since(start) < cfg.LoadedDuration && firstErr == nil {
			launch()
		}
		if inflight == 0 {
			break
		}
		x := <-results
		inflight--
		r.log.Set(int(time.Since(start).Seconds()))
		if x.err != nil {
			if firstErr == nil {
				firstErr = x.err
				r.log.Logf("loaded run: %v", x.err)
			}
			continue
		}
		r.account(x.o)
		ld.Jobs++
		if x.o.Exact {
			ld.Exact++
		}
	}
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
