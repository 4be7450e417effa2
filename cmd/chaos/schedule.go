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

const (
	scheduleName  = "chaos-ticks"
	scheduleEvery = 2 * time.Second
	// scheduleWindow is how long the schedule ticks; it goes on at least 10 s after the heal.
	scheduleWindow = 30 * time.Second
)

// tickJob is the job each tick makes: two shards, answer known.
var tickJob = knownjobs.Sleep(2, "")

// scheduleMainJob is the fault's own job: long enough to run through the schedule's window.
func scheduleMainJob(c Config) knownjobs.Job {
	return knownjobs.Sleep(3*c.Shards, c.ShardDelay.String())
}

// injectSchedule adds the schedule, lets it tick 6 s, runs hit, lets it tick on, pauses it and
// judges its ticks and their jobs.
func injectSchedule(hit func(ctx context.Context, f *faultRun) error) func(ctx context.Context, f *faultRun) error {
	return func(ctx context.Context, f *faultRun) error {
		c := f.e.c
		if _, err := c.Client.AddSchedule(ctx, scheduleName, client.ScheduleOptions{Every: scheduleEvery, Type: tickJob.Type,
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
		until := begin.Add(scheduleWindow)
		if t := f.healed.Add(10 * time.Second); t.After(until) {
			until = t
		}
		sleep(ctx, time.Until(until))
		end, err := retry(ctx, 30*time.Second, func() error { return c.Client.PauseSchedule(ctx, scheduleName) })
		if err != nil {
			return fmt.Errorf("pause the schedule: %w", err)
		}
		sleep(ctx, 3*time.Second) // a tick fired as it was paused lands
		var byTick map[time.Time][]string
		if _, err := retry(ctx, 30*time.Second, func() (err error) { byTick, err = rig.TickJobs(ctx, c, scheduleName); return err }); err != nil {
			return fmt.Errorf("list the schedule's jobs: %w", err)
		}
		r := rig.JudgeTicks(byTick, scheduleEvery, begin, end)
		f.note("schedule every %v: %d ticks made a job each in %.0f s (%d possible)", scheduleEvery, len(r.Ticks), end.Sub(begin).Seconds(), r.Possible)
		for _, x := range r.Twice {
			f.fail(verdictWrong, "schedule: "+x)
		}
		if len(r.Gaps) > 0 {
			f.fail(verdictLost, "schedule: "+strings.Join(r.Gaps, "; "))
		}
		if r.Few != "" {
			f.fail(verdictLost, "schedule: "+r.Few)
		}
		// Each tick's job runs once to its exact end.
		deadline := time.Now().Add(f.e.r.cfg.Deadline)
		var ids []string
		exact := 0
		for _, tk := range r.Ticks {
			for _, id := range byTick[tk] {
				ids = append(ids, id)
				st, ended := f.e.waitEnd(ctx, id, deadline)
				if !ended {
					f.fail(verdictStuck, fmt.Sprintf("schedule: job %s of tick %s not ended (%s)", id, tk.Format(time.TimeOnly), describe(st)))
					continue
				}
				if o := rig.Judge(rig.Outcome{ID: id}, tickJob, st); !o.Exact {
					f.fail(verdictFailed, "schedule: "+o.Problem)
					continue
				}
				exact++
			}
		}
		f.note("%d of %d tick jobs ended exact", exact, len(ids))
		if left := rig.Leftovers(ctx, c, ids); len(left) > 0 {
			f.fail(verdictLeft, "schedule's jobs: "+strings.Join(left, "; "))
		}
		return nil
	}
}

// retry calls fn until it succeeds or within passes (storage may be coming back); it returns
// when it succeeded.
func retry(ctx context.Context, within time.Duration, fn func() error) (time.Time, error) {
	until := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return time.Time{}, err
		}
		sleep(ctx, 200*time.Millisecond)
	}
}
