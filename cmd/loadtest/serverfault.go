package main

import (
	"context"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// outage is issue 11's NATS-outage run: a cluster on a nats-server process of its own,
// SIGKILLed mid-job for OutageDuration and started again on the same port and store. The job
// must finish exact, and the cluster may change leader at most once.
func (r *runner) outage(ctx context.Context) error {
	c, err := r.rig.Start(ctx, rig.Spec{Name: "outage", LeaseDuration: r.cfg.LeaseDuration, MapDelay: r.cfg.MapDelay, NATSProcess: true})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	np := c.NATSProcess()
	r.log.Logf("nats-outage: nats-server process on %s", np.URL())
	out := &report.Outage{}
	r.rep.Outage = out
	kill := func(context.Context) (string, string, error) {
		return "nats-server", "SIGKILL", np.Signal(syscall.SIGKILL)
	}
	title := func() string { return fmt.Sprintf("NATS outage (%.0f s, sleep)", out.DownS) }
	start, end, err := r.serverFault(ctx, c, scOutage, r.cfg.OutageDuration, true, &out.ServerFault, kill, np.Restart, title)
	if err != nil {
		return err
	}
	out.BrokeLeases = rig.CountEvents(c, string(election.EventBrokeLease), start, end, 0)
	r.log.Logf("nats-outage: exact %v, makespan %.2fs (reference %.2fs, down %.1fs): %d leader changes, %d lease breaks",
		out.Exact, out.MakespanS, out.ReferenceS, out.DownS, out.LeaderChanges, out.BrokeLeases)
	return nil
}

// natsClusterRun is issue 13's scenario: a 3-node NATS cluster, R3 streams, worker wN on node
// N−1. The leader's node is stopped mid-job for NodeDownDuration and restarted. The job must
// finish exact; the time lost against the same job without the fault is reported.
func (r *runner) natsClusterRun(ctx context.Context) error {
	cfg := r.cfg
	nc, err := devserver.StartNATSCluster(filepath.Join(cfg.Dir, "nats-cluster"), 3, nil)
	if err != nil {
		return err
	}
	defer nc.Stop()
	r.log.Logf("nats-cluster: 3 nodes on %s", nc.URLs())
	c, err := r.rig.Start(ctx, rig.Spec{Name: "n3", LeaseDuration: cfg.LeaseDuration, NATSURL: nc.URLs(),
		MapDelay: cfg.MapDelay, Env: []string{"STREAM_REPLICAS=3"}, WorkerEnv: rig.SpreadNATS(cfg.Workers, nc.URL)})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	res := &report.NATSCluster{Nodes: 3, Replicas: 3, KilledNode: -1}
	r.rep.NATSCluster = res
	stop := func(ctx context.Context) (string, string, error) {
		res.KilledNode = 0
		if l, err := c.Leader(ctx); err == nil && l != nil {
			var w int
			if _, err := fmt.Sscanf(l.ID, "w%d", &w); err == nil && w >= 1 {
				res.KilledNode = (w - 1) % 3
			}
		}
		nc.StopNode(res.KilledNode)
		return fmt.Sprintf("nats n%d", res.KilledNode), "stop", nil
	}
	restart := func() error { return nc.Start(res.KilledNode) }
	title := func() string {
		return fmt.Sprintf("3-node NATS cluster, node n%d down %.0f s", res.KilledNode, res.DownS)
	}
	if _, _, err := r.serverFault(ctx, c, scNATSCluster, cfg.NodeDownDuration, false, &res.ServerFault, stop, restart, title); err != nil {
		return err
	}
	r.log.Logf("nats-cluster: exact %v, makespan %.2fs against %.2fs without the fault: %.2fs lost; %d leader changes",
		res.Exact, res.MakespanS, res.ReferenceS, res.TimeLostS, res.LeaderChanges)
	return nil
}

// serverFault runs the failover job on c with a server down for down from 30 % of its results.
// A warm-up job and a reference run come first; the warm-up creates the consumers, so the
// reference measures what the faulted job does. stop takes the server down and names it and how;
// restart brings it back. With lessDown the time lost leaves out the time down. It fills f and
// returns when the faulted job ran.
func (r *runner) serverFault(ctx context.Context, c *cluster.Cluster, name string, down time.Duration, lessDown bool, f *report.ServerFault,
	stop func(context.Context) (string, string, error), restart func() error, title func() string) (start, end time.Time, err error) {
	job := knownjobs.Sleep(r.cfg.FailoverShards, "")
	if _, err := r.runJob(ctx, c, knownjobs.Sleep(20, ""), name+": warm-up", 20); err != nil {
		return start, end, err
	}
	ref, err := r.runJob(ctx, c, job, name+": reference", job.Shards)
	if err != nil {
		return start, end, err
	}
	if ref.Exact {
		f.ReferenceS = rig.Round3(ref.Makespan.Seconds())
	}
	r.log.Phase(name+": job with the fault", job.Shards)
	defer r.log.Done()
	lw := rig.WatchLease(ctx, c)
	defer lw.Stop()
	jctx, cancel := context.WithTimeout(ctx, r.cfg.JobTimeout+down)
	defer cancel()
	s, err := rig.Strike(jctx, c, job, 0.3)
	if err != nil {
		return start, end, err
	}
	defer s.Close()
	if s.Wait(jctx); ctx.Err() != nil {
		return start, end, ctx.Err()
	}
	f.Job = s.ID
	var marks []report.Kill
	if s.Reached {
		killed := time.Now()
		what, how, err := stop(jctx)
		if err != nil {
			return start, end, err
		}
		marks = append(marks, report.Kill{AtS: rig.Round3(killed.Sub(s.Start).Seconds()), Worker: what, Signal: how, Done: s.At.Done, Sent: killed})
		r.log.Logf("%s: %s (%s) with %d of %d results on the wire (%d merged); down for %v", name, what, how, s.Seen, job.Shards, s.At.Done, down)
		if err := rig.Sleep(ctx, down); err != nil {
			return start, end, err
		}
		if err := restart(); err != nil {
			return start, end, fmt.Errorf("restart %s: %w", what, err)
		}
		f.DownS = rig.Round3(time.Since(killed).Seconds())
		marks = append(marks, report.Kill{AtS: rig.Round3(time.Since(s.Start).Seconds()), Worker: what, Signal: "restart"})
		r.log.Logf("%s: %s back after %.1fs", name, what, f.DownS)
	}
	o, err := r.awaitEnd(ctx, jctx, job, s.Sampler, name, s.Start)
	if err != nil {
		return start, end, err
	}
	end = time.Now()
	terms := lw.Stop()
	f.Exact = o.Exact
	if o.Makespan > 0 {
		f.MakespanS = rig.Round3(o.Makespan.Seconds())
		if f.ReferenceS > 0 {
			f.TimeLostS = f.MakespanS - f.ReferenceS
			if lessDown {
				f.TimeLostS -= f.DownS
			}
			f.TimeLostS = rig.Round3(f.TimeLostS)
		}
	}
	time.Sleep(500 * time.Millisecond) // events buffered during the fault arrive
	f.LeaderChanges = rig.Changes(c, terms, s.Start, end)
	f.Timeline = report.NewTimeline(title(), s.Start, job.Shards, s.Close(), nil, marks, rig.Elects(c, s.Start, end), f.MakespanS)
	return s.Start, end, nil
}
