package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/jobs"
)

// fault is one row of the matrix.
type fault struct {
	name string
	what string
	job  func(Config) knownjobs.Job
	// inject runs once the job has cfg.At of its shards merged. It injects the fault, heals it
	// (restarts what it killed) and records when the fault was healed.
	inject       func(ctx context.Context, f *faultRun) error
	testWorker   bool           // the cluster runs the test worker (the bad-job faults, badjob.go)
	expectCancel bool           // the job must end cancelled (cancel during a failover)
	expectFailed string         // the job must end failed with an error containing this (its state was lost)
	minAge       time.Duration  // the fault hits no sooner than this after the submit
	dead         map[string]int // the dead letters the fault must leave (the injected messages), by source
}

// faultRun is one fault being run on its cluster c.
type faultRun struct {
	r        *runner
	c        *cluster.Cluster
	job      knownjobs.Job
	id       string
	start    time.Time
	healed   time.Time
	notes    []string
	more     []extraJob  // further jobs the fault submitted; each must end exact as well
	failures [][2]string // what the injection itself found wrong (verdict, problem)
	elected  time.Time   // when the leader that took over was elected (cancel during a failover)
	// changesSeen is the leader changes a fault counted itself (from the lease's epoch, after its
	// own set-up); nil: the elections announced from the injection on.
	changesSeen *int
}

type extraJob struct {
	id    string
	start time.Time
}

func (f *faultRun) fail(verdict, problem string) {
	f.failures = append(f.failures, [2]string{verdict, problem})
}

func (f *faultRun) note(format string, args ...any) {
	f.notes = append(f.notes, fmt.Sprintf(format, args...))
}

// leader returns the worker that holds the lease now.
func (f *faultRun) leader(ctx context.Context) (string, uint64, error) {
	l, err := rig.Leader(ctx, f.c)
	if err != nil {
		return "", 0, err
	}
	return l.ID, l.Epoch, nil
}

// failover kills the leader (SIGKILL) and restarts it, calls then (if any), marks the fault
// healed and waits for the next election.
func (f *faultRun) failover(ctx context.Context, then func() error) (cluster.Event, error) {
	fo, err := rig.FailLeader(ctx, f.c, rig.LeaderFault{Signal: syscall.SIGKILL, Restart: true, Within: 3 * f.r.cfg.LeaseDuration,
		Then: func() error {
			if then != nil {
				if err := then(); err != nil {
					return err
				}
			}
			f.healed = time.Now()
			return nil
		}})
	if err == nil {
		f.note("killed leader %s (epoch %d); %s elected (epoch %d) %.2f s later", fo.Worker, fo.Epoch, fo.Elected.Worker, fo.Elected.Epoch, fo.Elected.Time.Sub(f.healed).Seconds())
	}
	return fo.Elected, err
}

// submitMore submits the fault's job once more. It must end exact as well.
func (f *faultRun) submitMore(ctx context.Context) error {
	id, start, err := rig.Submit(ctx, f.c, f.job)
	if err == nil {
		f.more = append(f.more, extraJob{id: id, start: start})
	}
	return err
}

// Verdicts.
const (
	verdictOK          = report.VerdictOK
	verdictWrong       = "WRONG"
	verdictFailed      = "FAILED"
	verdictStuck       = "STUCK"
	verdictLost        = "LOST"
	verdictSlow        = "SLOW"
	verdictLeft        = "LEFT BEHIND"
	verdictNotDead     = "NOT DEAD-LETTERED"
	verdictNotCancel   = "NOT CANCELLED"
	verdictError       = "HARNESS ERROR"
	verdictInterrupted = "INTERRUPTED"
	verdictNotDeposed  = "NOT DEPOSED"
)

// runFault runs f on a cluster of its own and judges it.
func (r *runner) runFault(ctx context.Context, f fault, refs map[string]float64) report.FaultResult {
	j := f.job(r.cfg)
	res := report.FaultResult{Fault: f.name, What: f.what, Job: j.String()}
	fail := func(verdict, problem string) report.FaultResult {
		if res.Verdict == "" || res.Verdict == verdictOK {
			res.Verdict, res.Problem = verdict, problem
		} else {
			res.Problem += "; " + problem
		}
		return res
	}
	r.logf("fault %s: %s", f.name, f.what)
	c, err := r.startCluster(ctx, f.name, r.cfg.mapDelay(j), f.testWorker)
	if err != nil {
		return fail(verdictError, err.Error())
	}
	stop := sync.OnceFunc(func() { r.rig.Stop(c) })
	defer stop()

	fr := &faultRun{r: r, c: c, job: j}
	if fr.id, fr.start, err = rig.Submit(ctx, c, j); err != nil {
		return fail(verdictError, err.Error())
	}
	res.JobID = fr.id
	limit := r.cfg.Deadline + 2*time.Duration(j.Shards)*r.cfg.ShardDelay
	st, ok := rig.WaitProgress(ctx, c, fr.id, r.cfg.At, limit)
	if !ok {
		return fail(verdictStuck, fmt.Sprintf("job did not reach %.0f%% without a fault within %v (%s)", 100*r.cfg.At, limit, rig.Describe(st)))
	}
	if st.State.Terminal() {
		return fail(verdictError, fmt.Sprintf("job ended (%s) before the fault could be injected: make it longer (--shards, --shard-delay)", st.State))
	}
	if f.minAge > 0 {
		sleep(ctx, time.Until(fr.start.Add(f.minAge)))
		if st = rig.Status(ctx, c, fr.id); st == nil || st.State.Terminal() {
			return fail(verdictError, fmt.Sprintf("job ended or unreadable %v after the submit, before the fault: make it longer (--shards, --shard-delay)", f.minAge))
		}
	}
	res.InjectedAt = fmt.Sprintf("%d/%d", st.ShardsDone, st.ShardsTotal)
	injected := time.Now()
	if err := f.inject(ctx, fr); err != nil {
		res.Notes = fr.notes
		return fail(verdictError, "inject: "+err.Error())
	}
	r.rig.Track(c)
	if fr.healed.IsZero() {
		fr.healed = time.Now()
	}
	res.HealedS = rig.Round3(fr.healed.Sub(fr.start).Seconds())
	deadline := fr.healed.Add(r.cfg.Deadline)

	// Judge the job.
	fst, ended := rig.WaitEnd(ctx, c, fr.id, deadline)
	if fst != nil {
		res.State = string(fst.State)
		res.Merged = fmt.Sprintf("%d/%d", fst.ShardsDone, fst.ShardsTotal)
	}
	switch {
	case fst == nil:
		fail(verdictLost, fmt.Sprintf("job %s unreadable for %v after the fault was healed (its spec or checkpoint is gone)", fr.id, r.cfg.Deadline))
	case !ended:
		fail(verdictStuck, fmt.Sprintf("job %s not ended %v after the fault was healed (%s)", fr.id, r.cfg.Deadline, rig.Describe(fst)))
	case f.expectCancel:
		r.judgeCancel(fr, fst, &res, fail)
	case f.expectFailed != "":
		if fst.State != jobs.StateFailed || !strings.Contains(fst.Error, f.expectFailed) {
			fail(verdictWrong, fmt.Sprintf("job %s ended %s (%q), want failed with %q", fr.id, fst.State, rig.Clip(fst.Error, 200), f.expectFailed))
		}
	default:
		if o, verdict := judgeExact(j, fr.start, fst); verdict != "" {
			fail(verdict, o.Problem)
		} else {
			res.Exact = true
		}
		if fst.FinishedAt != nil {
			ms := fst.FinishedAt.Sub(fr.start).Seconds()
			res.MakespanS = rig.Round3(ms)
			if ref, ok := refs[j.String()]; ok {
				res.ReferenceS = ref
				lost := rig.Round3(ms - ref)
				res.TimeLostS = &lost
			}
		}
	}
	ids := []string{fr.id}
	for _, x := range fr.more {
		ids = append(ids, x.id)
		fr.judgeJob(ctx, c, x, deadline, " (submitted during the fault)")
	}
	for _, x := range fr.failures {
		fail(x[0], x[1])
	}
	for src, want := range f.dead {
		if n := rig.DeadLetters(ctx, c, src, uint64(want)); n < uint64(want) {
			fail(verdictNotDead, fmt.Sprintf("%d dead letters from %s, want at least %d (the injected messages)", n, src, want))
		} else {
			fr.note("%d dead letters from %s", n, src)
		}
	}
	res.LeaderChanges = rig.CountEvents(c, cluster.Elected, injected, time.Now(), 0)
	if fr.changesSeen != nil {
		res.LeaderChanges = *fr.changesSeen
	}
	res.LeftBehind = rig.Leftovers(ctx, c, ids)
	if exited := c.Exited(); len(exited) > 0 {
		fr.note("exited: %s", strings.Join(exited, ", "))
	}
	res.Notes = fr.notes
	stop()
	res.LeftBehind = append(res.LeftBehind, r.rig.LeftRunning()...)
	if ctx.Err() != nil { // what was measured after the interrupt means nothing
		res.Verdict, res.Problem = verdictInterrupted, "interrupted"
		return res
	}
	if len(res.LeftBehind) > 0 {
		fail(verdictLeft, strings.Join(res.LeftBehind, "; "))
	}
	if res.Verdict == "" {
		res.Verdict = verdictOK
	}
	return res
}

// judgeExact judges st, job j's end: the verdict is "" for the exact answer.
func judgeExact(j knownjobs.Job, start time.Time, st *client.Status) (rig.Outcome, string) {
	o := rig.Judge(rig.Outcome{ID: st.ID, Start: start}, j, st)
	switch {
	case o.Exact:
		return o, ""
	case st.State != jobs.StateSucceeded:
		return o, verdictFailed
	}
	return o, verdictWrong
}

// judgeJob waits until deadline for job x of f's type on c to end exact; what follows the job's
// id in a problem.
func (f *faultRun) judgeJob(ctx context.Context, c *cluster.Cluster, x extraJob, deadline time.Time, what string) (rig.Outcome, bool) {
	st, ended := rig.WaitEnd(ctx, c, x.id, deadline)
	switch {
	case st == nil:
		f.fail(verdictLost, fmt.Sprintf("job %s%s unreadable", x.id, what))
	case !ended:
		f.fail(verdictStuck, fmt.Sprintf("job %s%s not ended %v after the heal (%s)", x.id, what, f.r.cfg.Deadline, rig.Describe(st)))
	default:
		o, verdict := judgeExact(f.job, x.start, st)
		if verdict == "" {
			return o, true
		}
		f.fail(verdict, fmt.Sprintf("job %s%s: %s", x.id, what, o.Problem))
	}
	return rig.Outcome{}, false
}

// judgeCancel checks that the job ended cancelled within CancelWithin of the new leader's
// election.
func (r *runner) judgeCancel(fr *faultRun, st *client.Status, res *report.FaultResult, fail func(string, string) report.FaultResult) {
	if st.State != jobs.StateCancelled {
		fail(verdictNotCancel, fmt.Sprintf("job %s ended %s, not cancelled", st.ID, st.State))
		return
	}
	res.Exact = true // the exact outcome of a cancelled job is "cancelled"
	if fr.elected.IsZero() || st.FinishedAt == nil {
		fail(verdictError, "no election or no finish time recorded")
		return
	}
	after := rig.Round3(st.FinishedAt.Sub(fr.elected).Seconds())
	res.CancelAfterElectionS = &after
	fr.note("cancelled %.2f s after the new leader's election, %d of %d shards merged", after, st.ShardsDone, st.ShardsTotal)
	if after > r.cfg.CancelWithin.Seconds() {
		fail(verdictSlow, fmt.Sprintf("cancelled %.2f s after the new leader's election, want within %v", after, r.cfg.CancelWithin))
	}
}
