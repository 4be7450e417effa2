package rig

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
)

// Schedules watched through faults: each tick must make exactly one job, and each job must run
// to its exact end once.

// TickJobs returns the ids of the jobs schedule name made, by tick, from the job list of c.
func TickJobs(ctx context.Context, c *cluster.Cluster, name string) (map[time.Time][]string, error) {
	byTick := map[time.Time][]string{}
	f := client.Filter{Limit: client.MaxQueryLimit}
	for {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		page, err := c.Client.Query(qctx, f)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, st := range page.Jobs {
			if st.State == client.StateUnreadable {
				return nil, fmt.Errorf("job %s unreadable: %s", st.ID, st.Unreadable)
			}
			if st.Schedule == name && st.Tick != nil {
				tk := st.Tick.UTC()
				byTick[tk] = append(byTick[tk], st.ID)
			}
		}
		if page.Next == "" {
			return byTick, nil
		}
		f.Before = page.Next
	}
}

// TickReport judges the ticks of a schedule firing every period, watched from begin to end.
type TickReport struct {
	Ticks    []time.Time // the ticks that made a job, in order
	Possible int         // ticks in the window (begin, end]
	// Twice lists ticks that made more than one job; Gaps the holes between ticks; Few says
	// more than two ticks are missing at the window's edges.
	Twice []string
	Gaps  []string
	Few   string
}

// OK is true when every tick made one job and none is missing but at the window's edges.
func (r TickReport) OK() bool { return len(r.Twice) == 0 && len(r.Gaps) == 0 && r.Few == "" }

// JudgeTicks checks byTick (TickJobs) against a schedule of period every, watched from begin
// to end: no tick twice, no gap, at most two ticks missing at the edges.
func JudgeTicks(byTick map[time.Time][]string, every time.Duration, begin, end time.Time) TickReport {
	// Ticks are multiples of every since the Unix epoch: those in (begin, end].
	r := TickReport{Possible: int(end.UnixNano()/int64(every) - begin.UnixNano()/int64(every))}
	for tk, ids := range byTick {
		r.Ticks = append(r.Ticks, tk)
		if len(ids) != 1 {
			r.Twice = append(r.Twice, fmt.Sprintf("tick %s made %d jobs %v", tk.Format(time.TimeOnly), len(ids), ids))
		}
	}
	slices.SortFunc(r.Ticks, func(a, b time.Time) int { return a.Compare(b) })
	slices.Sort(r.Twice)
	for i := 1; i < len(r.Ticks); i++ {
		if d := r.Ticks[i].Sub(r.Ticks[i-1]); d != every {
			r.Gaps = append(r.Gaps, fmt.Sprintf("ticks %s and %s are %v apart", r.Ticks[i-1].Format(time.TimeOnly), r.Ticks[i].Format(time.TimeOnly), d))
		}
	}
	if len(r.Ticks) < r.Possible-2 {
		r.Few = fmt.Sprintf("%d ticks made jobs, want at least %d of the %d in %v", len(r.Ticks), r.Possible-2, r.Possible, end.Sub(begin).Round(time.Second))
	}
	return r
}

// TickRun is a schedule watched through a fault and judged: its ticks, then each tick's job.
type TickRun struct {
	TickReport
	Begin, End time.Time // from the schedule's start to its pause
	Jobs       int       // jobs the ticks made
	Exact      int       // of them, those that ended with the exact answer
	// Stuck and Wrong describe the jobs not ended in time, and those ended otherwise than exact.
	Stuck, Wrong []string
	// Left is what the jobs left behind (Leftovers).
	Left []string
}

// FinishSchedule pauses schedule name (retrying while storage comes back), judges the ticks it
// made since begin, and waits up to wait for each tick's job to end exact with j's answer.
func FinishSchedule(ctx context.Context, c *cluster.Cluster, name string, every time.Duration, begin time.Time, j knownjobs.Job, wait time.Duration) (TickRun, error) {
	r := TickRun{Begin: begin}
	var err error
	if r.End, err = Retry(ctx, 30*time.Second, func() error { return c.Client.PauseSchedule(ctx, name) }); err != nil {
		return r, fmt.Errorf("pause schedule %s: %w", name, err)
	}
	_ = Sleep(ctx, 3*time.Second) // a tick fired as it was paused lands
	var byTick map[time.Time][]string
	if _, err := Retry(ctx, 30*time.Second, func() (err error) { byTick, err = TickJobs(ctx, c, name); return err }); err != nil {
		return r, fmt.Errorf("list the jobs of schedule %s: %w", name, err)
	}
	r.TickReport = JudgeTicks(byTick, every, begin, r.End)
	deadline := time.Now().Add(wait)
	var ids []string
	for _, tk := range r.Ticks {
		for _, id := range byTick[tk] {
			ids = append(ids, id)
			st, ended := WaitEnd(ctx, c, id, deadline)
			if !ended {
				r.Stuck = append(r.Stuck, fmt.Sprintf("job %s of tick %s not ended (%s)", id, tk.Format(time.TimeOnly), Describe(st)))
				continue
			}
			if o := Judge(Outcome{ID: id}, j, st); !o.Exact {
				r.Wrong = append(r.Wrong, o.Problem)
				continue
			}
			r.Exact++
		}
	}
	r.Jobs = len(ids)
	r.Left = Leftovers(ctx, c, ids)
	return r, nil
}

// Retry calls fn until it succeeds or within passes (storage may be coming back), and returns
// when it succeeded.
func Retry(ctx context.Context, within time.Duration, fn func() error) (time.Time, error) {
	until := time.Now().Add(within)
	for {
		err := fn()
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return time.Time{}, err
		}
		_ = Sleep(ctx, 200*time.Millisecond)
	}
}
