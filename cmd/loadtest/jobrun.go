package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/jobs"
)

// outcome is how one submitted job ended.
type outcome struct {
	id       string
	start    time.Time // just before Submit
	status   *client.Status
	makespan time.Duration // start to the checkpoint's FinishedAt
	exact    bool
	lost     bool   // not ended within the job timeout
	problem  string // why it is not exact, or lost
}

// submit submits j on c and returns its id and the instant just before the submit.
func submit(ctx context.Context, c *cluster.Cluster, j jobSpec) (string, time.Time, error) {
	start := time.Now()
	id, err := c.Client.Submit(ctx, j.typ, j.params)
	if err != nil {
		return "", start, fmt.Errorf("submit %s: %w", j, err)
	}
	return id, start, nil
}

// await waits for job id to end (at most timeout) and checks its result. progress, if not nil,
// sees every status change.
func await(ctx context.Context, c *cluster.Cluster, j jobSpec, id string, start time.Time, timeout time.Duration, progress func(client.Status)) (outcome, error) {
	o := outcome{id: id, start: start}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Client.Wait(wctx, id, pollEvery, progress)
	if err != nil {
		if ctx.Err() != nil {
			return o, ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return o, fmt.Errorf("wait for %s: %w", id, err)
		}
		o.lost = true
		o.status = st
		o.problem = fmt.Sprintf("job %s not finished within %v", id, timeout)
		if st != nil {
			o.problem += fmt.Sprintf(" (%s, %d of %d shards merged)", st.State, st.ShardsDone, st.ShardsTotal)
		}
		return o, nil
	}
	return judge(o, j, st), nil
}

// judge fills the outcome of an ended job.
func judge(o outcome, j jobSpec, st *client.Status) outcome {
	o.status = st
	if st.FinishedAt != nil {
		o.makespan = st.FinishedAt.Sub(o.start)
	}
	switch {
	case st.State != jobs.StateSucceeded:
		o.problem = fmt.Sprintf("job %s %s: %s", o.id, st.State, st.Error)
	default:
		if err := j.check(st.Result); err != nil {
			o.problem = fmt.Sprintf("job %s: %v", o.id, err)
		} else {
			o.exact = true
		}
	}
	return o
}

// plannedAt returns when the leader reported planning id (zero if not seen).
func plannedAt(c *cluster.Cluster, id string) time.Time {
	for _, e := range c.Events() {
		if e.Kind == cluster.JobPlanned && e.Job == id {
			return e.Time
		}
	}
	return time.Time{}
}

// pollEvery is how often await reads a job's status. Reading it costs the storage emulator CPU the
// system under test competes for, and makespans come from the checkpoint's FinishedAt, not from
// the poll, so it need not be fast.
var pollEvery = 250 * time.Millisecond

func seconds(d time.Duration) float64 { return d.Seconds() }

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// awaitEnd waits, within jctx, for job id to end, judges it (lost when it did not end in time;
// what names the run in that problem) and accounts for it.
func (r *runner) awaitEnd(ctx, jctx context.Context, c *cluster.Cluster, job jobSpec, smp *sampler, what, id string, start time.Time) (outcome, error) {
	last, ended, err := smp.waitFor(jctx, func(s sample) bool { return s.State.Terminal() })
	if err != nil && ctx.Err() != nil {
		return outcome{}, ctx.Err()
	}
	o := outcome{id: id, start: start}
	if !ended {
		o.lost, o.problem = true, fmt.Sprintf("%s job %s not finished (%s, %d of %d merged)", what, id, last.State, last.Done, last.Total)
	} else {
		st, err := c.Client.Status(ctx, id)
		if err != nil {
			return outcome{}, err
		}
		o = judge(o, job, st)
	}
	r.account(o)
	return o, nil
}
