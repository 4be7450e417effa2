package main

// Takeover by failure class (issue 21): the leader crashed, paused, cut from NATS or from
// storage, the NATS server restarted, the node of a 3-node NATS cluster that leads the results
// stream killed. Each class runs FailClassRuns jobs on a cluster of its own.

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// The failure classes, as scenario names.
const (
	scClassKill        = "class-sigkill"
	scClassStop        = "class-sigstop"
	scClassNATSCut     = "class-nats-cut"
	scClassStorageCut  = "class-storage-cut"
	scClassNATSRestart = "class-nats-restart"
	scClassNATSNode    = "class-nats-node"
)

var failClasses = []string{scClassKill, scClassStop, scClassNATSCut, scClassStorageCut, scClassNATSRestart, scClassNATSNode}

// classWhat says what each class does to the cluster.
var classWhat = map[string]string{
	scClassKill:        "the leader SIGKILLed and restarted",
	scClassStop:        "the leader SIGSTOPped until another is elected, then SIGCONT",
	scClassNATSCut:     "the leader silently cut from NATS (blackholing proxy) until another is elected, +1 s",
	scClassStorageCut:  "the leader silently cut from blob storage and the queue until another is elected, +1 s",
	scClassNATSRestart: "the nats-server process SIGKILLed and restarted 1 s later",
	scClassNATSNode:    "in a 3-node NATS cluster (R3), the node leading the results stream SIGKILLed, restarted --node-down-duration later",
}

// classTakesOver reports whether the class must change the leader.
func classTakesOver(class string) bool {
	return class != scClassNATSRestart && class != scClassNATSNode
}

// FailClass and ClassRun are the report's (package report).
type (
	FailClass = report.FailClass
	ClassRun  = report.ClassRun
)

// errNoFault: a run ended before its fault could hit; it is run again.
var errNoFault = errors.New("no fault")

// classRig is one class's cluster and what the class needs to strike it.
type classRig struct {
	r     *runner
	class string
	c     *cluster.Cluster
	fc    *fcluster
	links map[string]*rig.Links // the cut classes
	nodes *rig.NATSNodes        // class-nats-node
	js    jetstream.JetStream   // class-nats-node: the harness's view of the streams
}

// failClasses runs every selected class in turn.
func (r *runner) failClasses(ctx context.Context) error {
	var errs []error
	for _, class := range failClasses {
		if !r.cfg.has(class) {
			continue
		}
		fc, err := r.failClass(ctx, class)
		if fc != nil {
			r.mu.Lock()
			r.rep.FailClasses = append(r.rep.FailClasses, *fc)
			r.mu.Unlock()
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			errs = append(errs, fmt.Errorf("%s: %w", class, err))
		}
	}
	return errors.Join(errs...)
}

// failClass starts the class's cluster and runs its jobs.
func (r *runner) failClass(ctx context.Context, class string) (*FailClass, error) {
	cfg := r.cfg
	cr, err := r.startClass(ctx, class)
	if err != nil {
		return nil, err
	}
	defer cr.stop()
	out := &FailClass{Class: class, What: classWhat[class], Env: strings.Join(cfg.FailClassEnv, " ")}
	r.log.Phase(class, cfg.FailClassRuns)
	defer r.log.Done()
	var runErr error
	for n, again := 1, 0; n <= cfg.FailClassRuns && ctx.Err() == nil; {
		run, err := cr.run(ctx, n)
		if errors.Is(err, errNoFault) && again < cfg.FailClassRuns {
			again++
			r.log.Logf("%s run %d: %v; again", class, n, err)
			continue
		}
		if err != nil {
			run.Error = err.Error()
			r.errorf("%s run %d: %v", class, n, err)
		}
		out.Results = append(out.Results, run)
		r.log.Add(1)
		r.log.Logf("%s", describeClassRun(class, run))
		if err != nil {
			runErr = err // the cluster is in an unknown state
			break
		}
		n++
	}
	out.Summarize()
	return out, runErr
}

// startClass starts the cluster a class needs.
func (r *runner) startClass(ctx context.Context, class string) (*classRig, error) {
	cfg := r.cfg
	cr := &classRig{r: r, class: class}
	spec := rig.Spec{Name: strings.TrimPrefix(class, "class-"), Workers: cfg.Workers, Concurrency: cfg.Concurrency, MapDelay: cfg.MapDelay,
		LeaseDuration: cfg.LeaseDuration, ShardTimeout: cfg.ShardTimeout, Env: slices.Clone(cfg.FailClassEnv)}
	switch class {
	case scClassNATSCut, scClassStorageCut:
		links, env, err := rig.ProxyLinks(rig.WorkerIDs(cfg.Workers), r.rig.NATSURL(), r.rig.ConnStr())
		if err != nil {
			return nil, err
		}
		cr.links, spec.WorkerEnv = links, env
	case scClassNATSRestart:
		spec.NATSProcess = true
	case scClassNATSNode:
		nodes, err := r.rig.StartNATSNodes(ctx, filepath.Join(cfg.Dir, "class-nats-nodes"), 3)
		if err != nil {
			return nil, err
		}
		cr.nodes = nodes
		nodes.Place(&spec)
	}
	c, err := r.rig.Start(ctx, spec)
	if err != nil {
		cr.stop()
		return nil, err
	}
	cr.c = c
	cr.fc = &fcluster{r: r, name: spec.Name, c: c, refs: map[string]float64{}}
	if cr.nodes != nil {
		if cr.js, err = cr.nodes.JetStream("loadtest-streams"); err != nil {
			cr.stop()
			return nil, err
		}
	}
	return cr, nil
}

func (cr *classRig) stop() {
	if cr.js != nil {
		cr.js.Conn().Close()
	}
	if cr.c != nil {
		cr.r.rig.Stop(cr.c)
	}
	for _, l := range cr.links {
		l.Close()
	}
	if cr.nodes != nil {
		cr.nodes.Stop()
	}
}

// run submits a job, strikes at 30 % of it, follows the takeover (or its absence), heals and
// judges the job.
func (cr *classRig) run(ctx context.Context, n int) (ClassRun, error) {
	cfg := cr.r.cfg
	run := ClassRun{N: n}
	leader, err := rig.Ready(ctx, cr.c, cfg.Workers, 3*cfg.LeaseDuration+10*time.Second)
	if err != nil {
		return run, err
	}
	run.Victim, run.Epoch = leader.ID, leader.Epoch
	job := knownjobs.Sleep(cfg.FailoverShards, "")
	lw := rig.WatchLease(ctx, cr.c)
	terms := func() []election.LeaderInfo { return lw.Stop() }
	id, start, err := rig.Submit(ctx, cr.c, job)
	if err != nil {
		terms()
		return run, err
	}
	run.Job = id
	smp := rig.StartSampler(ctx, cr.c, id, 50*time.Millisecond)
	defer smp.Close()
	jctx, cancel := context.WithTimeout(ctx, cfg.JobTimeout)
	defer cancel()
	at, reached, err := smp.WaitFor(jctx, func(s rig.Sample) bool {
		return s.State.Terminal() || s.Total > 0 && 10*s.Done >= 3*s.Total
	})
	if err != nil || !reached || at.State.Terminal() {
		terms()
		if err == nil && at.State.Terminal() {
			_, _ = cr.r.awaitEnd(ctx, jctx, job, smp, cr.class, start) // judged all the same
			return run, fmt.Errorf("%w: the job ended before 30%% was seen (%s, %d of %d)", errNoFault, at.State, at.Done, at.Total)
		}
		return run, fmt.Errorf("the job did not reach 30%% before the fault (%s, %d of %d)", at.State, at.Done, at.Total)
	}
	run.Done = at.Done
	struck, healed, err := cr.strike(jctx, &run, leader, smp)
	if err != nil {
		terms()
		return run, err
	}
	run.HealedS = rig.Round3(healed.Sub(struck).Seconds())
	if !classTakesOver(cr.class) {
		// Merging resumes: the first checkpoint with more merged than any up to 0.5 s after the
		// fault (a checkpoint in flight at the fault is written after it).
		settled := struck.Add(500 * time.Millisecond)
		var before int
		for _, s := range smp.Until(settled) {
			before = max(before, s.Done)
		}
		if s, ok, _ := smp.WaitFor(jctx, func(s rig.Sample) bool { return s.T.After(settled) && s.Done > before }); ok {
			run.ToFirstMergeS = rig.Round3(s.T.Sub(struck).Seconds())
		}
	}
	o, err := cr.r.awaitEnd(ctx, jctx, job, smp, cr.class, start)
	if err != nil {
		terms()
		return run, err
	}
	run.Exact = o.Exact
	if o.Makespan > 0 {
		run.MakespanS = rig.Round3(o.Makespan.Seconds())
	}
	if !o.Exact {
		run.Error = o.Problem
	}
	if run.NewEpoch != 0 {
		newSeen := false
		for _, s := range smp.Until(time.Now()) {
			newSeen = newSeen || s.Writer >= run.NewEpoch
			if newSeen && s.Writer == run.Epoch {
				run.OldWrites++
			}
		}
	}
	time.Sleep(300 * time.Millisecond) // events on their way arrive
	run.LeaderChanges = rig.Changes(cr.c, terms(), start, time.Now())
	return run, nil
}

// strike injects the class's fault into the cluster whose leader is l, follows the takeover and
// heals. It returns when the fault hit and when it was healed.
func (cr *classRig) strike(ctx context.Context, run *ClassRun, l *election.LeaderInfo, smp *rig.Sampler) (struck, healed time.Time, err error) {
	c, cfg := cr.c, cr.r.cfg
	within := 3*cfg.LeaseDuration + 10*time.Second
	switch cr.class {
	case scClassKill:
		k, err := rig.KillLeader(ctx, c, syscall.SIGKILL, true, l)
		if err != nil {
			return k.At, k.At, err
		}
		struck, healed = k.At, k.At
	case scClassStop:
		p := c.Proc(l.ID)
		struck = time.Now()
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			return struck, struck, err
		}
		defer func() { _ = p.Signal(syscall.SIGCONT); healed = time.Now() }()
	case scClassNATSCut, scClassStorageCut:
		lk := cr.links[l.ID]
		if lk == nil {
			return time.Now(), time.Now(), fmt.Errorf("no proxied links for %s", l.ID)
		}
		struck = time.Now()
		if cr.class == scClassNATSCut {
			lk.CutNATS()
		} else {
			lk.CutStorage()
		}
		defer func() {
			if rig.Sleep(ctx, time.Second) == nil {
				lk.Heal()
			}
			healed = time.Now()
		}()
	case scClassNATSRestart:
		struck, err := cr.r.rig.RestartNATS(ctx, c, time.Second)
		return struck, time.Now(), err
	case scClassNATSNode:
		return cr.killStreamLeader(ctx, run)
	}
	ev, err := rig.WaitElected(ctx, c, l.Epoch, within)
	if err != nil {
		return struck, time.Now(), err
	}
	run.NewLeader, run.NewEpoch = ev.Worker, ev.Epoch
	run.ToLeaderS = rig.Round3(ev.Time.Sub(struck).Seconds())
	d := rig.Detected(c, l.Epoch, struck)
	run.Path, run.DetectS, run.BreakS = d.Path, rig.Round3(d.Detect.Seconds()), rig.Round3(d.Break.Seconds())
	run.ProbeS = firstProbe(c, l.Epoch, struck)
	if ok, s := cr.fc.awaitFirstMerge(ctx, smp, Kill{at: struck, NewEpoch: ev.Epoch}); ok {
		run.ToFirstMergeS = s
	}
	return struck, healed, nil
}

// killStreamLeader kills the node that leads the results stream, waits for the stream's new
// Raft leader, and restarts the node NodeDownDuration after the kill.
func (cr *classRig) killStreamLeader(ctx context.Context, run *ClassRun) (struck, healed time.Time, err error) {
	stream := cr.c.Names().ResultStream()
	name, i, err := cr.nodes.LeaderNode(ctx, cr.js, stream)
	if err != nil {
		return time.Now(), time.Now(), err
	}
	run.Victim = "nats " + name
	struck = time.Now()
	if err := cr.nodes.Kill(i); err != nil {
		return struck, struck, err
	}
	down := cr.r.cfg.NodeDownDuration
	took, lastErr := rig.WaitNewLeader(ctx, cr.js, stream, name, struck, down)
	run.StreamLeaderS = rig.Round3(took.Seconds())
	if run.StreamLeaderS == 0 {
		cr.r.log.Logf("%s: no new leader of %s while %s was down (last: %v)", cr.class, stream, name, lastErr)
	}
	if err := rig.Sleep(ctx, time.Until(struck.Add(down))); err != nil {
		return struck, time.Now(), err
	}
	if err := cr.nodes.Restart(cr.r.rig, i); err != nil {
		return struck, time.Now(), err
	}
	return struck, time.Now(), nil
}

// describeClassRun is the one-line account of a run for the progress display.
func describeClassRun(class string, r ClassRun) string {
	s := fmt.Sprintf("%s run %d: %s (epoch %d) at %d merged", class, r.N, r.Victim, r.Epoch, r.Done)
	if r.StreamLeaderS > 0 {
		s += fmt.Sprintf("; stream leader after %.3fs", r.StreamLeaderS)
	}
	if r.NewEpoch != 0 {
		s += fmt.Sprintf(" → %s leads after %.3fs (probe at %.3fs, %s at %.3fs, break at %.3fs)", r.NewLeader, r.ToLeaderS, r.ProbeS, r.Path, r.DetectS, r.BreakS)
	}
	if r.ToFirstMergeS > 0 {
		s += fmt.Sprintf(", merges after %.3fs", r.ToFirstMergeS)
	}
	s += fmt.Sprintf("; %d leader changes", r.LeaderChanges)
	switch {
	case r.Error != "":
		s += "; " + r.Error
	case r.Exact:
		s += fmt.Sprintf("; exact in %.2fs", r.MakespanS)
	}
	return s
}

// classTargets are issue 21's targets per failure class.
func classTargets(cfg *Config, rep *Report, add func(name, want string, value float64, unit string, met, judged bool, note string)) {
	speed := !cfg.Quick
	for _, fc := range rep.FailClasses {
		exact := fc.Exact == fc.Runs && fc.Runs > 0
		note := fmt.Sprintf("%d runs, %d exact", fc.Runs, fc.Exact)
		switch fc.Class {
		case scClassKill:
			add("SIGKILL class p90: fault → new leader", "≤ 0.3 s", fc.ToLeader.P90, " s", fc.ToLeader.N > 0 && fc.ToLeader.P90 <= 0.3 && exact, speed && fc.ToLeader.N > 0, note)
			add("SIGKILL class p90: fault → its first merge", "≤ 0.4 s", fc.ToFirstMerge.P90, " s", fc.ToFirstMerge.N > 0 && fc.ToFirstMerge.P90 <= 0.4 && exact, speed && fc.ToFirstMerge.N > 0, note)
		case scClassStop, scClassNATSCut:
			add(fmt.Sprintf("%s p90: fault → new leader", fc.Class), "≤ 1.5 s, exact", fc.ToLeader.P90, " s", fc.ToLeader.N > 0 && fc.ToLeader.P90 <= 1.5 && exact, speed && fc.ToLeader.N > 0, note)
			add(fmt.Sprintf("%s: checkpoints of the deposed leader after the break", fc.Class), "0", float64(fc.OldWrites), "", fc.OldWrites == 0, fc.Runs > 0, note)
		case scClassStorageCut:
			add(fmt.Sprintf("%s p90: fault → new leader (lease-bound, reported)", fc.Class), "reported", fc.ToLeader.P90, " s", exact, false, note)
		case scClassNATSRestart:
			add("NATS server SIGKILLed, restarted 1 s later: leader changes", "0, exact", float64(fc.LeaderChanges), "", fc.LeaderChanges == 0 && exact, fc.Runs > 0, note)
		case scClassNATSNode:
			add("R3 node leading the results stream killed: JetStream's own election p90 (reported)", "reported", fc.StreamLeader.P90, " s", exact, false,
				fmt.Sprintf("%s; %d leader changes", note, fc.LeaderChanges))
		}
	}
}

// firstProbe is fault → the first probing event of epoch at or after struck, in seconds; 0 when
// none.
func firstProbe(c *cluster.Cluster, epoch uint64, struck time.Time) float64 {
	for _, e := range c.Events() {
		if e.Epoch == epoch && e.Kind == string(election.EventProbing) && !e.Time.Before(struck) {
			return rig.Round3(e.Time.Sub(struck).Seconds())
		}
	}
	return 0
}
