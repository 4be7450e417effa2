package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
)

// Schedule faults: a schedule firing every 2 s ticks through the fault. Each tick must make
// exactly one job (none twice, none missing but at the window's edges: missed ticks are caught
// up), and each of those jobs must end exact.

const scheduleEvery = 2 * time.Second

// tickJob is the job each tick makes: two shards, answer known.
var tickJob = knownjobs.Sleep(2, "")

// scheduleMainJob is the fault's own job: long enough to run through the schedule's window.
func scheduleMainJob(c Config) knownjobs.Job {
	return knownjobs.Sleep(3*c.Shards, c.ShardDelay.String())
}

// injectSchedule adds the schedule, lets it tick 6 s, runs hit, lets it tick until 30 s after
// its start and 10 s after the heal, then pauses it and judges its ticks and their jobs.
func injectSchedule(hit func(ctx context.Context, f *faultRun) error) func(ctx context.Context, f *faultRun) error {
	return func(ctx context.Context, f *faultRun) error {
		const name = "chaos-ticks"
		if _, err := f.c.Client.AddSchedule(ctx, name, client.ScheduleOptions{Every: scheduleEvery, Type: tickJob.Type,
			Params: tickJob.Params, Overlap: protocol.OverlapAllow, CatchUp: time.Minute}); err != nil {
			return fmt.Errorf("add schedule: %w", err)
		}
		begin := time.Now()
		sleep(ctx, 6*time.Second)
		if err := hit(ctx, f); err != nil {
			return err
		}
		if f.healed.IsZero() {
			f.healed = time.Now()
		}
		sleep(ctx, time.Until(begin.Add(30*time.Second)))
		sleep(ctx, time.Until(f.healed.Add(10*time.Second)))
		r, err := rig.FinishSchedule(ctx, f.c, name, scheduleEvery, begin, tickJob, f.r.cfg.Deadline)
		if err != nil {
			return err
		}
		f.note("schedule every %v: %d ticks made a job each in %.0f s (%d possible); %d of %d tick jobs ended exact",
			scheduleEvery, len(r.Ticks), r.End.Sub(r.Begin).Seconds(), r.Possible, r.Exact, r.Jobs)
		for _, p := range []struct {
			verdict string
			what    []string
		}{{verdictWrong, r.Twice}, {verdictLost, r.Gaps}, {verdictLost, []string{r.Few}}, {verdictStuck, r.Stuck}, {verdictFailed, r.Wrong}, {verdictLeft, r.Left}} {
			if s := strings.Join(p.what, "; "); s != "" {
				f.fail(p.verdict, "schedule: "+s)
			}
		}
		return nil
	}
}
