package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/jobs"
)

// task is one failover run to do.
type task struct {
	kind   string // scCrash, scGraceful, scWorkerCrash
	n      int    // 1-based within its kind
	double bool   // crash: kill the next leader too
	job    jobSpec
	cost   time.Duration // expected wall time, for scheduling
	seed   uint64
}

// tasks lists the failover runs of cfg, longest first (so parallel clusters finish together).
func (r *runner) tasks() []task {
	cfg := r.cfg
	var ts []task
	leaderRuns := 0
	job := func() jobSpec {
		leaderRuns++
		if cfg.PrimesEvery > 0 && leaderRuns%cfg.PrimesEvery == 0 {
			to := uint64(10_000_000)
			if (leaderRuns/cfg.PrimesEvery)%2 == 0 {
				to = 20_000_000
			}
			return primesJob(to, cfg.FailoverShards)
		}
		return sleepJob(cfg.FailoverShards, "")
	}
	jobTime := time.Duration(cfg.FailoverShards/cfg.slots()) * cfg.MapDelay
	if cfg.has(scCrash) {
		for i := 1; i <= cfg.CrashRuns; i++ {
			t := task{kind: scCrash, n: i, job: job(), cost: cfg.LeaseDuration + jobTime + 2*time.Second}
			if cfg.DoubleKillEvery > 0 && i%cfg.DoubleKillEvery == 0 {
				t.double = true
				t.cost += cfg.LeaseDuration + time.Second
			}
			ts = append(ts, t)
		}
	}
	if cfg.has(scGraceful) {
		for i := 1; i <= cfg.GracefulRuns; i++ {
			ts = append(ts, task{kind: scGraceful, n: i, job: job(), cost: jobTime + 2*time.Second})
		}
	}
	if cfg.has(scWorkerCrash) {
		for i := 1; i <= cfg.WorkerCrashRuns; i++ {
			ts = append(ts, task{kind: scWorkerCrash, n: i, job: sleepJob(cfg.FailoverShards, ""), cost: cfg.ShardTimeout + jobTime + 2*time.Second})
		}
	}
	for i := range ts {
		ts[i].seed = cfg.Seed + uint64(i)*0x9e3779b97f4a7c15
	}
	slices.SortStableFunc(ts, func(a, b task) int { return int(b.cost - a.cost) })
	return ts
}

// fcluster is one cluster running failover tasks one after another.
type fcluster struct {
	r    *runner
	name string
	c    *cluster.Cluster
	sn   *sniffer
	refs map[string]float64 // job type → makespan of a run without kills (seconds)
}

// failover runs scenarios 3, 4 and 5 on Parallel clusters side by side.
func (r *runner) failover(ctx context.Context) error {
	ts := r.tasks()
	if len(ts) == 0 {
		return nil
	}
	r.log.Phase("failover runs", len(ts))
	defer r.log.Done()
	queue := make(chan task, len(ts))
	for _, t := range ts {
		queue <- t
	}
	close(queue)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var runs []FailoverRun
	n := min(r.cfg.Parallel, len(ts))
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.failoverCluster(ctx, fmt.Sprintf("f%d", i+1), queue, func(run FailoverRun) {
				mu.Lock()
				runs = append(runs, run)
				mu.Unlock()
				r.log.Add(1)
				r.log.Logf("%s", describe(run))
			})
		}()
	}
	wg.Wait()
	slices.SortFunc(runs, func(a, b FailoverRun) int {
		if a.Kind != b.Kind {
			return slices.Index(allScenarios, a.Kind) - slices.Index(allScenarios, b.Kind)
		}
		return a.N - b.N
	})
	r.summarizeFailover(runs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.Join(errs...)
}

// failoverCluster starts a cluster and runs tasks from queue on it until the queue is empty.
func (r *runner) failoverCluster(ctx context.Context, name string, queue <-chan task, report func(FailoverRun)) error {
	cfg := r.cfg
	c, err := r.env.startCluster(ctx, clusterSpec{name: name, concurrency: cfg.Concurrency, mapDelay: cfg.MapDelay,
		leaseDuration: cfg.LeaseDuration, shardTimeout: cfg.ShardTimeout})
	if err != nil {
		return err
	}
	defer r.env.stopCluster(c)
	sn, err := startSniffer(c)
	if err != nil {
		return err
	}
	defer sn.close()
	fc := &fcluster{r: r, name: name, c: c, sn: sn, refs: map[string]float64{}}
	for t := range queue {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		run, err := fc.run(ctx, t)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// The cluster is in an unknown state: report the run and leave the rest of the
			// queue to the other clusters.
			run.Error = err.Error()
			r.errorf("%s run %d on %s: %v", t.kind, t.n, name, err)
			report(run)
			return err
		}
		report(run)
	}
	return nil
}

// reference runs j once without kills on this cluster (once per job type) and returns its
// makespan in seconds. It doubles as the cluster's warm-up.
func (fc *fcluster) reference(ctx context.Context, j jobSpec) (float64, error) {
	if s, ok := fc.refs[j.typ]; ok {
		return s, nil
	}
	if _, err := fc.ready(ctx); err != nil {
		return 0, err
	}
	id, start, err := submit(ctx, fc.c, j)
	if err != nil {
		return 0, err
	}
	o, err := await(ctx, fc.c, j, id, start, fc.r.cfg.JobTimeout, nil)
	if err != nil {
		return 0, err
	}
	fc.r.account(o)
	fc.sn.take(id)
	if o.lost || !o.exact {
		return 0, fmt.Errorf("reference job: %s", o.problem)
	}
	fc.refs[j.typ] = o.makespan.Seconds()
	return fc.refs[j.typ], nil
}

// ready waits until every worker runs and the lease holder has resumed as coordinator, and
// returns the leader.
func (fc *fcluster) ready(ctx context.Context) (*election.LeaderInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*fc.r.cfg.LeaseDuration+10*time.Second)
	defer cancel()
	for {
		running := fc.c.Running()
		l, err := fc.c.Leader(ctx)
		if err == nil && l != nil && len(running) == fc.r.cfg.Workers && slices.Contains(running, l.ID) {
			for _, e := range fc.c.Events() {
				if e.Kind == cluster.TermStarted && e.Epoch == l.Epoch && e.Worker == l.ID {
					return l, nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster %s not ready (running %v, leader %+v, err %v): %w", fc.name, running, l, err, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// run does one task: submit, kill at a random point of progress, restart the victim, follow the
// failover, wait for the job and check its result.
func (fc *fcluster) run(ctx context.Context, t task) (FailoverRun, error) {
	cfg := fc.r.cfg
	rng := rand.New(rand.NewPCG(t.seed, 0x5eed))
	run := FailoverRun{Kind: t.kind, N: t.n, Cluster: fc.name, JobType: t.job.typ, Shards: t.job.shards}
	ref, err := fc.reference(ctx, t.job)
	if err != nil {
		return run, err
	}
	run.ReferenceS = round3(ref)
	leader, err := fc.ready(ctx)
	if err != nil {
		return run, err
	}
	id, start, err := submit(ctx, fc.c, t.job)
	if err != nil {
		return run, err
	}
	run.Job = id
	smp := startSampler(ctx, fc.c, id, 100*time.Millisecond)
	defer smp.close()
	jctx, cancel := context.WithTimeout(ctx, cfg.JobTimeout)
	defer cancel()

	run.KillAt = round3(0.1 + 0.8*rng.Float64())
	at, reached, err := smp.waitFor(jctx, func(s sample) bool {
		return s.State.Terminal() || s.Total > 0 && s.State == jobs.StateRunning && float64(s.Done) >= run.KillAt*float64(s.Total)
	})
	if err != nil && ctx.Err() != nil {
		return run, ctx.Err()
	}
	var victims []victim
	switch {
	case !reached:
		// The job did not get there in time: it is lost (judged below).
	case at.State.Terminal():
		run.Skipped = fmt.Sprintf("the job ended before %.0f%% progress was seen", 100*run.KillAt)
	case t.kind == scWorkerCrash:
		followers := slices.DeleteFunc(fc.c.Running(), func(w string) bool { return w == leader.ID })
		if len(followers) == 0 {
			return run, errors.New("no follower to kill")
		}
		w := followers[rng.IntN(len(followers))]
		k, v, err := fc.kill(w, syscall.SIGKILL, start, at.Done)
		if err != nil {
			return run, err
		}
		run.Kills = append(run.Kills, k)
		victims = append(victims, v)
	default:
		sig := syscall.SIGKILL
		if t.kind == scGraceful {
			sig = syscall.SIGTERM
		}
		k, v, err := fc.killLeader(jctx, sig, start, at.Done, leader)
		if err != nil {
			return run, err
		}
		victims = append(victims, v)
		if t.double && k.NewLeader != "" {
			// Kill the leader that just took over, as soon as it is seen elected.
			cur, _, _ := smp.last()
			l2 := &election.LeaderInfo{ID: k.NewLeader, Epoch: k.NewEpoch}
			k2, v2, err := fc.killLeader(jctx, syscall.SIGKILL, start, cur.Done, l2)
			k.MergeSeen, k.ToMergeS = fc.firstMerge(k)
			run.Kills = append(run.Kills, k)
			if err != nil {
				return run, err
			}
			k = k2
			victims = append(victims, v2)
		}
		if k.NewEpoch != 0 {
			k.MergeSeen, k.ToMergeS = fc.awaitFirstMerge(jctx, smp, k)
		}
		run.Kills = append(run.Kills, k)
	}

	last, ended, err := smp.waitFor(jctx, func(s sample) bool { return s.State.Terminal() })
	if err != nil && ctx.Err() != nil {
		return run, ctx.Err()
	}
	o := outcome{id: id, start: start}
	if !ended {
		o.lost = true
		o.problem = fmt.Sprintf("job %s not finished within %v (%s, %d of %d merged)", id, cfg.JobTimeout, last.State, last.Done, last.Total)
	} else {
		st, err := fc.c.Client.Status(ctx, id)
		if err != nil {
			return run, err
		}
		if st.State == jobs.StateSucceeded { // status is metadata only: read the result
			if st.Result, err = fc.c.Client.Result(ctx, id); err != nil {
				return run, err
			}
		}
		o = judge(o, t.job, st)
		run.Duplicates = st.Duplicates
		run.Result = st.Result
		run.State = string(st.State)
	}
	fc.r.account(o)
	run.Exact, run.Lost, run.Error = o.exact, o.lost, o.problem
	if o.makespan > 0 {
		run.MakespanS = round3(o.makespan.Seconds())
		run.TimeLostS = round3(o.makespan.Seconds() - ref)
	}
	samples := smp.close()
	results, dispatches := fc.sn.take(id)
	rd := classify(results, dispatches, fc.sn.backupsOf(id), victims)
	run.Redelivered, run.CompletedTwice, run.Redone, run.CompletedRerun = rd.redelivered, rd.completedTwice, rd.redone, rd.completedRerun
	run.Redispatched, run.Results, run.BackedUp = rd.redispatched, rd.results, rd.backedUp
	if len(run.Kills) > 0 {
		for _, o := range results {
			if o.Attempt > 1 {
				run.RerunAfterS = append(run.RerunAfterS, round3(o.T.Sub(run.Kills[0].at).Seconds()))
			}
		}
	}
	end := time.Now()
	for _, e := range fc.c.Events() {
		if e.Kind == cluster.Elected && e.Time.After(start) && e.Time.Before(end) {
			run.Elections = append(run.Elections, Elect{AtS: round3(e.Time.Sub(start).Seconds()), Worker: e.Worker, Epoch: e.Epoch})
		}
	}
	run.timeline = &timeline{title: fmt.Sprintf("%s run %d (%s, %s)", t.kind, t.n, t.job.typ, fc.name), start: start,
		total: t.job.shards, samples: samples, completed: firstCompletions(results), kills: run.Kills, elections: run.Elections,
		finished: run.MakespanS}
	return run, nil
}

// awaitFirstMerge waits for the first result merged by the leader elected after kill k. The new
// leader may have nothing to merge (a stopping leader can finish the job itself), so the wait
// also ends when the job does.
func (fc *fcluster) awaitFirstMerge(ctx context.Context, smp *sampler, k Kill) (bool, float64) {
	var ended time.Time
	for {
		if ok, s := fc.firstMerge(k); ok {
			return ok, s
		}
		if x, have, _ := smp.last(); have && x.State.Terminal() && ended.IsZero() {
			ended = time.Now()
		}
		// The event of a merge that came before the end may still be on its way.
		if !ended.IsZero() && time.Since(ended) > 500*time.Millisecond {
			return false, 0
		}
		select {
		case <-ctx.Done():
			return false, 0
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// firstMerge reports whether the leader that took over after kill k merged a result already,
// and how long after k.
func (fc *fcluster) firstMerge(k Kill) (bool, float64) {
	for _, e := range fc.c.Events() {
		if e.Kind == cluster.FirstMerge && e.Epoch == k.NewEpoch {
			return true, round3(e.Time.Sub(k.at).Seconds())
		}
	}
	return false, 0
}

// killLeader signals the leader l, restarts it at once (the cluster keeps its size) and waits
// for another election.
func (fc *fcluster) killLeader(ctx context.Context, sig syscall.Signal, start time.Time, done int, l *election.LeaderInfo) (Kill, victim, error) {
	// The lease must name the process we are about to kill.
	cur, err := fc.c.Leader(ctx)
	if err != nil {
		return Kill{}, victim{}, err
	}
	if cur == nil || cur.ID != l.ID || cur.Epoch != l.Epoch {
		return Kill{}, victim{}, fmt.Errorf("leader changed before the kill: expected %s (epoch %d), lease says %+v", l.ID, l.Epoch, cur)
	}
	k, v, err := fc.kill(l.ID, sig, start, done)
	if err != nil {
		return k, v, err
	}
	k.Leader, k.Epoch = true, l.Epoch
	wctx, cancel := context.WithTimeout(ctx, 3*fc.r.cfg.LeaseDuration+10*time.Second)
	defer cancel()
	ev, err := fc.c.WaitEvent(wctx, func(e cluster.Event) bool { return e.Kind == cluster.Elected && e.Epoch > l.Epoch })
	if err != nil {
		return k, v, fmt.Errorf("no new leader after %v of %s: %w", sig, l.ID, err)
	}
	k.NewLeader, k.NewEpoch = ev.Worker, ev.Epoch
	k.ToLeaderS = round3(ev.Time.Sub(k.at).Seconds())
	return k, v, nil
}

// kill signals worker w, waits for it to exit and restarts it under the same id.
func (fc *fcluster) kill(w string, sig syscall.Signal, start time.Time, done int) (Kill, victim, error) {
	at, err := fc.c.Signal(w, sig)
	exited := time.Now()
	k := Kill{at: at, AtS: round3(at.Sub(start).Seconds()), Worker: w, Signal: sigName(sig), Done: done, ExitS: round3(exited.Sub(at).Seconds())}
	v := victim{worker: w, exited: exited}
	if err != nil {
		return k, v, err
	}
	if _, err := fc.c.StartWorker(w); err != nil {
		return k, v, fmt.Errorf("restart %s: %w", w, err)
	}
	return k, v, nil
}

func sigName(s syscall.Signal) string {
	switch s {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// describe is the one-line account of a run for the progress display.
func describe(r FailoverRun) string {
	s := fmt.Sprintf("%s run %d [%s, %s]:", r.Kind, r.N, r.Cluster, r.JobType)
	if r.Skipped != "" {
		s += " no kill: " + r.Skipped + ";"
	}
	for _, k := range r.Kills {
		s += fmt.Sprintf(" %s %s at %d/%d", k.Signal, k.Worker, k.Done, r.Shards)
		if k.Leader {
			s += fmt.Sprintf(" → %s leads after %.2fs", k.NewLeader, k.ToLeaderS)
			if k.MergeSeen {
				s += fmt.Sprintf(", merges after %.2fs", k.ToMergeS)
			}
		}
		s += ";"
	}
	switch {
	case r.Lost:
		s += " LOST"
	case r.Exact:
		s += " exact"
	default:
		s += " WRONG: " + r.Error
	}
	s += fmt.Sprintf(" in %.2fs (ref %.2fs); redone %d, duplicates %d", r.MakespanS, r.ReferenceS, r.Redone, r.Duplicates)
	if r.CompletedRerun > 0 {
		s += fmt.Sprintf(", %d COMPLETED SHARDS RE-RUN", r.CompletedRerun)
	}
	return s
}
