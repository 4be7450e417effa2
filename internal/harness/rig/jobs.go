package rig

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/jobs"
)

// Outcome is how one submitted job ended.
type Outcome struct {
	ID       string
	Start    time.Time // just before Submit
	Status   *client.Status
	Makespan time.Duration // Start to the job's FinishedAt
	Exact    bool
	Lost     bool   // not ended in time
	Problem  string // why it is not exact, or lost
}

// Submit submits j on c and returns its id and the instant just before the submit.
func Submit(ctx context.Context, c *cluster.Cluster, j knownjobs.Job) (string, time.Time, error) {
	start := time.Now()
	id, err := c.Client.Submit(ctx, j.Type, j.Params)
	if err != nil {
		return "", start, fmt.Errorf("submit %s: %w", j, err)
	}
	return id, start, nil
}

// PollEvery is how often Await reads a job's status. Reads cost the storage emulator CPU the
// system under test competes for; makespans come from FinishedAt, so it need not be fast.
var PollEvery = 250 * time.Millisecond

// Await waits at most timeout for job id to end and judges it. progress, if not nil, sees every
// status change. A job not ended in time is lost, not an error.
func Await(ctx context.Context, c *cluster.Cluster, j knownjobs.Job, id string, start time.Time, timeout time.Duration, progress func(client.Status)) (Outcome, error) {
	o := Outcome{ID: id, Start: start}
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Client.Wait(wctx, id, PollEvery, progress)
	if err != nil {
		if ctx.Err() != nil {
			return o, ctx.Err()
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return o, fmt.Errorf("wait for %s: %w", id, err)
		}
		o.Lost, o.Status = true, st
		o.Problem = fmt.Sprintf("job %s not finished within %v (%s)", id, timeout, Describe(st))
		return o, nil
	}
	return Judge(o, j, st), nil
}

// Judge fills the outcome of an ended job: exact when it succeeded with j's answer.
func Judge(o Outcome, j knownjobs.Job, st *client.Status) Outcome {
	o.Status = st
	if st.FinishedAt != nil {
		o.Makespan = st.FinishedAt.Sub(o.Start)
	}
	switch {
	case st.State != jobs.StateSucceeded:
		o.Problem = fmt.Sprintf("job %s %s: %s", o.ID, st.State, Clip(st.Error, 300))
	default:
		if err := j.Check(st.Result); err != nil {
			o.Problem = fmt.Sprintf("job %s: %v", o.ID, err)
		} else {
			o.Exact = true
		}
	}
	return o
}

// Reference is the reference run: j once on c without a fault. It fails unless j ends exact
// within timeout.
func Reference(ctx context.Context, c *cluster.Cluster, j knownjobs.Job, timeout time.Duration, progress func(client.Status)) (Outcome, error) {
	id, start, err := Submit(ctx, c, j)
	if err != nil {
		return Outcome{}, err
	}
	o, err := Await(ctx, c, j, id, start, timeout, progress)
	if err == nil && !o.Exact {
		err = fmt.Errorf("reference run of %s: %s", j, o.Problem)
	}
	return o, err
}

// Status reads a job's status, nil while it cannot be read (storage down, not yet written).
func Status(ctx context.Context, c *cluster.Cluster, id string) *client.Status {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.Client.Status(sctx, id)
	if err != nil {
		return nil
	}
	return st
}

// WaitProgress waits until at least frac of id's shards are merged or it ended. It is false when
// limit passed first.
func WaitProgress(ctx context.Context, c *cluster.Cluster, id string, frac float64, limit time.Duration) (*client.Status, bool) {
	until := time.Now().Add(limit)
	for {
		st := Status(ctx, c, id)
		if st != nil && (st.State.Terminal() || st.ShardsTotal > 0 && float64(st.ShardsDone) >= frac*float64(st.ShardsTotal)) {
			return st, true
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return st, false
		}
		_ = Sleep(ctx, 50*time.Millisecond)
	}
}

// Final is an ended job's status with its result: status is metadata only, so a succeeded job's
// result is read on its own.
func Final(ctx context.Context, c *cluster.Cluster, id string) (*client.Status, error) {
	st, err := c.Client.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	return withResult(ctx, c, st)
}

// withResult adds a succeeded job's result to st, read without reading its status again.
func withResult(ctx context.Context, c *cluster.Cluster, st *client.Status) (*client.Status, error) {
	if st.State == jobs.StateSucceeded && st.Result == nil {
		res, err := c.Client.ResultOf(ctx, st)
		if err != nil {
			return nil, fmt.Errorf("result of %s: %w", st.ID, err)
		}
		st.Result = res
	}
	return st, nil
}

// WaitEnd polls id until it ends. It is false, with the last status read, when deadline passed
// first.
// An ended job's status carries its result.
func WaitEnd(ctx context.Context, c *cluster.Cluster, id string, deadline time.Time) (*client.Status, bool) {
	var last *client.Status
	for {
		if st := Status(ctx, c, id); st != nil {
			last = st
			if st.State.Terminal() {
				if fin, err := withResult(ctx, c, st); err == nil {
					return fin, true
				} // else the result is not readable yet (storage down): poll again
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false
		}
		_ = Sleep(ctx, PollEvery)
	}
}

// Describe is a status in a few words.
func Describe(st *client.Status) string {
	if st == nil {
		return "status unreadable"
	}
	s := fmt.Sprintf("%s, %d of %d shards merged", st.State, st.ShardsDone, st.ShardsTotal)
	if st.Error != "" {
		s += ": " + Clip(st.Error, 300)
	}
	return s
}

// PlannedAt returns when the leader reported planning id (zero if not seen).
func PlannedAt(c *cluster.Cluster, id string) time.Time {
	for _, e := range c.Events() {
		if e.Kind == cluster.JobPlanned && e.Job == id {
			return e.Time
		}
	}
	return time.Time{}
}

// KeepRunning runs j on c, n jobs at a time, starting new ones until until; then it waits for
// the last. done gets, in the caller's goroutine, each ended job's outcome and the first error.
// After that error it starts no more jobs, and it returns the error.
func KeepRunning(ctx context.Context, c *cluster.Cluster, j knownjobs.Job, n int, until time.Time, timeout time.Duration, done func(Outcome, error)) error {
	type result struct {
		o   Outcome
		err error
	}
	results := make(chan result, n)
	running := 0
	var firstErr error
	for {
		for running < n && time.Now().Before(until) && firstErr == nil {
			running++
			go func() {
				id, start, err := Submit(ctx, c, j)
				if err != nil {
					results <- result{err: err}
					return
				}
				o, err := Await(ctx, c, j, id, start, timeout, nil)
				results <- result{o, err}
			}()
		}
		if running == 0 {
			return firstErr
		}
		x := <-results
		running--
		switch {
		case x.err == nil:
			done(x.o, nil)
		case firstErr == nil:
			firstErr = x.err
			done(x.o, x.err)
		}
	}
}

// PlannedAfter is seconds from o's submit to its job_planned event (0 if not seen).
func PlannedAfter(c *cluster.Cluster, o Outcome) float64 {
	if p := PlannedAt(c, o.ID); !p.IsZero() {
		return Round3(p.Sub(o.Start).Seconds())
	}
	return 0
}

// Struck is a job submitted to be hit by a fault.
type Struck struct {
	ID      string
	Start   time.Time // just before the submit
	Sampler *Sampler  // its checkpoint every 100 ms, until the job ends or ctx does
	At      Sample    // after Wait: the last checkpoint sample when frac of the results were on the wire
	Seen    int       // after Wait: results on the wire then
	Reached bool      // after Wait: false when the job ended, or ctx did, first
	rw      *ResultWatch
}

// Strike submits j on c to be hit by a fault when frac of its results are on the wire. At a high
// rate a checkpoint comes too late to strike by. Close it when done.
func Strike(ctx context.Context, c *cluster.Cluster, j knownjobs.Job, frac float64) (*Struck, error) {
	rw, err := WatchResults(c, int(math.Ceil(frac*float64(j.Shards))))
	if err != nil {
		return nil, err
	}
	s := &Struck{rw: rw}
	if s.ID, s.Start, err = Submit(ctx, c, j); err != nil {
		rw.Stop()
		return nil, err
	}
	s.Sampler = StartSampler(ctx, c, s.ID, 100*time.Millisecond)
	return s, nil
}

// Wait waits until frac of the job's results are on the wire, the job ends, or ctx ends.
func (s *Struck) Wait(ctx context.Context) {
	select {
	case <-s.rw.Reached():
	case <-s.Sampler.Done():
	case <-ctx.Done():
	}
	s.rw.Stop()
	s.At, _, _ = s.Sampler.Last()
	s.Seen = s.rw.Seen()
	s.Reached = ctx.Err() == nil && !s.At.State.Terminal()
}

// Close stops watching the job and returns every checkpoint sample.
func (s *Struck) Close() []Sample {
	s.rw.Stop()
	return s.Sampler.Close()
}

// Ready waits until c runs workers workers and the lease holder has resumed as coordinator (its
// term started), and returns the leader.
func Ready(ctx context.Context, c *cluster.Cluster, workers int, within time.Duration) (*election.LeaderInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	for {
		running := c.Running()
		l, err := c.Leader(ctx)
		if err == nil && l != nil && len(running) == workers && slices.Contains(running, l.ID) {
			for _, e := range c.Events() {
				if e.Kind == cluster.TermStarted && e.Epoch == l.Epoch && e.Worker == l.ID {
					return l, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster %s not ready (running %v, leader %+v, err %v): %w", filepath.Base(c.Options().Dir), running, l, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
