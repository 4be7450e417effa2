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
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/jobs"
)

// task is one failover run to do.
type task struct {
	kind   string // scCrash, scGraceful, scWorkerCrash
	n      int    // 1-based within its kind
	double bool   // crash: kill the next leader too
	job    knownjobs.Job
	cost   time.Duration // expected wall time, for scheduling
	seed   uint64
}

// tasks lists the failover runs of cfg, longest first (so parallel clusters finish together).
func (r *runner) tasks() []task {
	cfg := r.cfg
	var ts []task
	leaderRuns := 0
	job := func() knownjobs.Job {
		leaderRuns++
		if cfg.PrimesEvery > 0 && leaderRuns%cfg.PrimesEvery == 0 {
			to := uint64(10_000_000)
			if (leaderRuns/cfg.PrimesEvery)%2 == 0 {
				to = 20_000_000
			}
			return knownjobs.Primes(to, cfg.FailoverShards)
		}
		return knownjobs.Sleep(cfg.FailoverShards, "")
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
			ts = append(ts, task{kind: scWorkerCrash, n: i, job: knownjobs.Sleep(cfg.FailoverShards, ""), cost: cfg.ShardTimeout + jobTime + 2*time.Second})
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
	sn   *rig.Sniffer
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
	var mu sync.Mutex
	var runs []report.FailoverRun
	err := rig.Parallel(min(r.cfg.Parallel, len(ts)), ts, func(i int, queue <-chan task) error {
		return r.failoverCluster(ctx, fmt.Sprintf("f%d", i+1), queue, func(run report.FailoverRun) {
			mu.Lock()
			runs = append(runs, run)
			mu.Unlock()
			r.log.Add(1)
			r.log.Logf("%s", run.Summary())
		})
	})
	slices.SortFunc(runs, func(a, b report.FailoverRun) int {
		if a.Kind != b.Kind {
			return slices.Index(allScenarios, a.Kind) - slices.Index(allScenarios, b.Kind)
		}
		return a.N - b.N
	})
	r.summarizeFailover(runs)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// failoverCluster starts a cluster and runs tasks from queue on it until the queue is empty.
func (r *runner) failoverCluster(ctx context.Context, name string, queue <-chan task, report func(report.FailoverRun)) error {
	cfg := r.cfg
	c, sn, stop, err := r.rig.StartSniffed(ctx, rig.Spec{Name: name, Concurrency: cfg.Concurrency, MapDelay: cfg.MapDelay,
		LeaseDuration: cfg.LeaseDuration, ShardTimeout: cfg.ShardTimeout})
	if err != nil {
		return err
	}
	defer stop()
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
func (fc *fcluster) reference(ctx context.Context, j knownjobs.Job) (float64, error) {
	if s, ok := fc.refs[j.Type]; ok {
		return s, nil
	}
	if _, err := rig.Ready(ctx, fc.c, fc.r.cfg.Workers, 3*fc.r.cfg.LeaseDuration+10*time.Second); err != nil {
		return 0, err
	}
	o, err := rig.Reference(ctx, fc.c, j, fc.r.cfg.JobTimeout, nil)
	if o.ID != "" {
		fc.r.account(o)
		fc.sn.Take(o.ID)
	}
	if err != nil {
		return 0, err
	}
	fc.refs[j.Type] = o.Makespan.Seconds()
	return fc.refs[j.Type], nil
}

// run does one task: submit, kill at a random point of progress, restart the victim, follow the
// failover, wait for the job and check its result.
func (fc *fcluster) run(ctx context.Context, t task) (report.FailoverRun, error) {
	cfg := fc.r.cfg
	rng := rand.New(rand.NewPCG(t.seed, 0x5eed))
	run := report.FailoverRun{Kind: t.kind, N: t.n, Cluster: fc.name, JobType: t.job.Type, Shards: t.job.Shards}
	ref, err := fc.reference(ctx, t.job)
	if err != nil {
		return run, err
	}
	run.ReferenceS = rig.Round3(ref)
	leader, err := rig.Ready(ctx, fc.c, fc.r.cfg.Workers, 3*fc.r.cfg.LeaseDuration+10*time.Second)
	if err != nil {
		return run, err
	}
	id, start, err := rig.Submit(ctx, fc.c, t.job)
	if err != nil {
		return run, err
	}
	run.Job = id
	smp := rig.StartSampler(ctx, fc.c, id, 100*time.Millisecond)
	defer smp.Close()
	jctx, cancel := context.WithTimeout(ctx, cfg.JobTimeout)
	defer cancel()

	run.KillAt = rig.Round3(0.1 + 0.8*rng.Float64())
	at, reached, err := smp.WaitFor(jctx, func(s rig.Sample) bool {
		return s.State.Terminal() || s.Total > 0 && s.State == jobs.StateRunning && float64(s.Done) >= run.KillAt*float64(s.Total)
	})
	if err != nil && ctx.Err() != nil {
		return run, ctx.Err()
	}
	var victims []rig.Kill
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
		rk, err := rig.Signal(fc.c, w, syscall.SIGKILL, true)
		if err != nil {
			return run, err
		}
		run.Kills = append(run.Kills, report.NewKill(rk, start, at.Done))
		victims = append(victims, rk)
	default:
		sig := syscall.SIGKILL
		if t.kind == scGraceful {
			sig = syscall.SIGTERM
		}
		fo, err := fc.killLeader(jctx, sig, leader)
		victims = append(victims, fo.Kill)
		if err != nil {
			return run, err
		}
		k := leaderKill(fo, start, at.Done)
		if t.double {
			// Kill the leader that just took over, as soon as it is seen elected.
			cur, _, _ := smp.Last()
			fo2, err := fc.killLeader(jctx, syscall.SIGKILL, &election.LeaderInfo{ID: k.NewLeader, Epoch: k.NewEpoch})
			now, cancel := context.WithCancel(ctx)
			cancel() // look once
			fc.firstMerge(now, smp, fo, &k)
			run.Kills = append(run.Kills, k)
			victims = append(victims, fo2.Kill)
			if err != nil {
				return run, err
			}
			fo, k = fo2, leaderKill(fo2, start, cur.Done)
		}
		fc.firstMerge(jctx, smp, fo, &k)
		run.Kills = append(run.Kills, k)
	}

	o, err := fc.r.awaitEnd(ctx, jctx, t.job, smp, t.kind, start)
	if err != nil {
		return run, err
	}
	if st := o.Status; st != nil {
		run.Duplicates, run.Result, run.State = st.Duplicates, st.Result, string(st.State)
	}
	run.Exact, run.Lost, run.Error = o.Exact, o.Lost, o.Problem
	if o.Makespan > 0 {
		run.MakespanS = rig.Round3(o.Makespan.Seconds())
		run.TimeLostS = rig.Round3(o.Makespan.Seconds() - ref)
	}
	samples := smp.Close()
	results, dispatches := fc.sn.Take(id)
	rd := rig.Classify(results, dispatches, fc.sn.BackupsOf(id), victims)
	run.Redelivered, run.CompletedTwice, run.Redone, run.CompletedRerun = rd.Redelivered, rd.CompletedTwice, rd.Redone, rd.CompletedRerun
	run.Redispatched, run.Results, run.BackedUp = rd.Redispatched, rd.Results, rd.BackedUp
	if len(run.Kills) > 0 {
		for _, o := range results {
			if o.Attempt > 1 {
				run.RerunAfterS = append(run.RerunAfterS, rig.Round3(o.T.Sub(run.Kills[0].Sent).Seconds()))
			}
		}
	}
	run.Elections = rig.Elects(fc.c, start, time.Now())
	run.Timeline = report.NewTimeline(fmt.Sprintf("%s run %d (%s, %s)", t.kind, t.n, t.job.Type, fc.name), start, t.job.Shards, samples,
		rig.FirstCompletions(results), run.Kills, run.Elections, run.MakespanS)
	return run, nil
}

// awaitFirstMerge waits for the first result merged by the leader elected after kill k, and
// says how long after k it came.
func (fc *fcluster) awaitFirstMerge(ctx context.Context, smp *rig.Sampler, k Kill) (bool, float64) {
	d, ok := rig.FirstMergeAfter(ctx, fc.c, k.NewEpoch, k.at, smp.Done())
	return ok, rig.Round3(d.Seconds())
}

// firstMerge records in k when the leader elected in fo merged its first result.
func (fc *fcluster) firstMerge(ctx context.Context, smp *rig.Sampler, fo rig.Failover, k *report.Kill) {
	d, ok := fo.FirstMerge(ctx, fc.c, smp.Done())
	k.MergeSeen, k.ToMergeS = ok, rig.Round3(d.Seconds())
}

// killLeader signals the leader l, restarts it at once (the cluster keeps its size) and waits
// for another election.
func (fc *fcluster) killLeader(ctx context.Context, sig syscall.Signal, l *election.LeaderInfo) (rig.Failover, error) {
	return rig.FailLeader(ctx, fc.c, rig.LeaderFault{Signal: sig, Restart: true, Expect: l, Within: 3*fc.r.cfg.LeaseDuration + 10*time.Second})
}

// leaderKill is the report's account of the leader's failover fo.
func leaderKill(fo rig.Failover, start time.Time, done int) report.Kill {
	k := report.NewKill(fo.Kill, start, done)
	k.Leader, k.Epoch = true, fo.Epoch
	k.NewLeader, k.NewEpoch, k.ToLeaderS = fo.Elected.Worker, fo.Elected.Epoch, rig.Round3(fo.ToLeader.Seconds())
	return k
}
