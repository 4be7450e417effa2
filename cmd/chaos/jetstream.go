package main

// JetStream durability (issue 21): JetStream fsyncs its file store on an interval, so a crash
// can lose acknowledged messages (Jepsen, NATS 2.12). A kill -9 alone loses nothing the kernel
// holds, so these faults roll the store back to a copy taken a moment before: every message
// acknowledged since (results, shards, acks, the plan of a job submitted meanwhile) is gone.
// The answer must stay exact: it rests on the blob checkpoint and self-repair.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// tailWindow is how long the cluster runs between the store's copy and the kill: the tail lost.
const tailWindow = 1500 * time.Millisecond

// rollback is one store rolled back under a running cluster: the copy, a job submitted after
// it, the tail window, the kill, the restore and the restart.
type rollback struct {
	f       *faultRun
	c       *cluster.Cluster
	js      jetstream.JetStream
	np      *devserver.NATSProcess
	restart func() error
	// replicated: the store is one replica of three, so the others may keep what it loses.
	replicated bool
}

// run rolls the store back and returns the second job (submitted inside the lost window).
func (rb *rollback) run(ctx context.Context, what string) (extraJob, error) {
	f, names := rb.f, rb.c.Names()
	before, err := rig.LastSeqs(ctx, rb.js, names)
	if err != nil {
		return extraJob{}, err
	}
	snap, err := rig.SnapshotStore(rb.np)
	if err != nil {
		return extraJob{}, err
	}
	rw, err := rig.WatchResults(rb.c, 1<<30)
	if err != nil {
		return extraJob{}, err
	}
	id, at, err := rig.Submit(ctx, rb.c, f.job)
	if err != nil {
		rw.Stop()
		return extraJob{}, err
	}
	sleep(ctx, tailWindow)
	rw.Stop()
	acked, err := rig.LastSeqs(ctx, rb.js, names)
	if err != nil {
		return extraJob{}, err
	}
	if err := rb.np.Signal(syscall.SIGKILL); err != nil {
		return extraJob{}, err
	}
	if err := snap.Restore(); err != nil {
		return extraJob{}, err
	}
	sleep(ctx, time.Second)
	if err := rb.restart(); err != nil {
		return extraJob{}, err
	}
	f.healed = time.Now()
	after, err := rig.WaitSeqs(ctx, rb.js, names, 30*time.Second)
	if err != nil {
		return extraJob{}, fmt.Errorf("after the rollback: %w", err)
	}
	f.note("%s: store copied at results seq %d, shards seq %d; job %s submitted; %d results published and acknowledged in the next %v (results seq %d, shards seq %d); kill -9, store rolled back, restarted: results seq %d, shards seq %d",
		what, before.Results, before.Shards, id, rw.Seen(), tailWindow, acked.Results, acked.Shards, after.Results, after.Shards)
	lost := after.Results < acked.Results || after.Shards < acked.Shards
	switch {
	case lost:
		f.note("%s: %d acknowledged result and %d shard messages lost with the tail", what, acked.Results-min(after.Results, acked.Results), acked.Shards-min(after.Shards, acked.Shards))
	case rb.replicated:
		f.note("%s: the other two replicas kept every acknowledged message; the node caught up from them", what)
	default:
		f.fail(verdictError, fmt.Sprintf("%s: the rollback lost no acknowledged message (results seq %d → %d, shards %d → %d): the fault did not bite", what, acked.Results, after.Results, acked.Shards, after.Shards))
	}
	return extraJob{id: id, start: at}, nil
}

// injectJetStreamTail rolls the single nats-server's store back 1.5 s, past a second job's
// submit: both jobs must end exact.
func injectJetStreamTail(ctx context.Context, f *faultRun) error {
	np := f.c.NATSProcess()
	if np == nil {
		return fmt.Errorf("the cluster has no nats-server process")
	}
	rb := &rollback{f: f, c: f.c, js: rig.JetStream(f.c), np: np, restart: func() error {
		if err := np.Restart(); err != nil {
			return err
		}
		f.r.rig.Track(f.c)
		return nil
	}}
	x, err := rb.run(ctx, "nats-server")
	if err != nil {
		return err
	}
	f.more = append(f.more, x)
	for _, id := range []string{f.id, x.id} {
		rig.WaitEnd(ctx, f.c, id, time.Now().Add(f.r.cfg.Deadline))
	}
	drain(ctx, f, f.c, []string{f.id, x.id})
	return nil
}

// resultsAckWait is the results consumer's AckWait (bus.DefaultConfig).
const resultsAckWait = 60 * time.Second

// drain waits, once the jobs ended, for their results to leave the results stream. The restored
// consumer still counts as delivered what it had handed out when the store was copied; those
// messages come back, and are acknowledged, only after its AckWait.
func drain(ctx context.Context, f *faultRun, c *cluster.Cluster, ids []string) {
	start := time.Now()
	names := c.Names()
	for {
		var left uint64
		for _, id := range ids {
			n, err := rig.StreamCount(ctx, c, names.ResultStream(), names.ResultSubject(id))
			if err != nil {
				left++
			}
			left += n
		}
		if left == 0 {
			f.note("the results stream was empty %.1f s after the jobs ended", time.Since(start).Seconds())
			return
		}
		if time.Since(start) > resultsAckWait+15*time.Second || ctx.Err() != nil {
			f.fail(verdictLeft, fmt.Sprintf("%d results of the ended jobs still on the results stream %.0f s after they ended", left, time.Since(start).Seconds()))
			return
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// injectJetStreamR3 runs on a cluster of its own on 3 nats-server processes with R3 streams: the
// node that leads the results stream is killed (kill -9) 1.5 s after its store was copied, and
// restarts from the copy. A job running and a job submitted in the window must end exact. The
// fault's own job, on the usual cluster, runs beside it.
func injectJetStreamR3(ctx context.Context, f *faultRun) error {
	r := f.r
	nodes, err := r.rig.StartNATSNodes(ctx, filepath.Join(r.cfg.Dir, "jetstream-r3-nats"), 3)
	if err != nil {
		return err
	}
	defer nodes.Stop()
	spec := rig.Spec{Name: "jetstream-r3", Workers: r.cfg.Workers, LeaseDuration: r.cfg.LeaseDuration, ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2}
	nodes.Place(&spec)
	c, err := r.rig.Start(ctx, spec)
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	js, err := nodes.JetStream("chaos-r3")
	if err != nil {
		return err
	}
	defer js.Conn().Close()
	id, start, err := rig.Submit(ctx, c, f.job)
	if err != nil {
		return err
	}
	if st, ok := rig.WaitProgress(ctx, c, id, r.cfg.At, r.cfg.Deadline); !ok || st.State.Terminal() {
		return fmt.Errorf("R3 job %s did not reach %.0f%% running (%s)", id, 100*r.cfg.At, rig.Describe(st))
	}
	leader, i, err := nodes.LeaderNode(ctx, js, c.Names().ResultStream())
	if err != nil {
		return err
	}
	rb := &rollback{f: f, c: c, js: js, np: nodes.Nodes[i], restart: func() error { return nodes.Restart(r.rig, i) }, replicated: true}
	x, err := rb.run(ctx, "R3 node "+leader+" (results stream leader)")
	if err != nil {
		return err
	}
	for _, y := range []extraJob{{id: id, start: start}, x} {
		if o, ok := f.judgeJob(ctx, c, y, time.Now().Add(r.cfg.Deadline), " (R3)"); ok {
			f.note("R3 job %s exact in %.2f s", y.id, o.Makespan.Seconds())
		}
	}
	drain(ctx, f, c, []string{id, x.id})
	if left := rig.Leftovers(ctx, c, []string{id, x.id}); len(left) > 0 {
		f.fail(verdictLeft, "R3: "+strings.Join(left, "; "))
	}
	return nil
}

// jetStreamFaults are this file's rows of the matrix.
func jetStreamFaults(sleepJob func(Config) knownjobs.Job) []fault {
	return []fault{
		{name: "jetstream-tail", what: "nats-server's store is rolled back 1.5 s (copied, then kill -9 right after the publishes of that window, a second job's among them, and restored): both jobs end exact", job: sleepJob, inject: injectJetStreamTail},
		{name: "jetstream-r3-tail", what: "on 3 nats-server nodes with R3 streams, the results stream's leader node is killed (kill -9) 1.5 s after its store was copied and restarts from the copy: the jobs running and submitted in the window end exact", job: sleepJob, inject: injectJetStreamR3},
	}
}
