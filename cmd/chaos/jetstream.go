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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
)

// tailWindow is how long the cluster runs between the store's copy and the kill: the tail lost.
const tailWindow = 1500 * time.Millisecond

// streamSeqs are the last sequences of a cluster's shards and results streams.
type streamSeqs struct{ shards, results uint64 }

func lastSeqs(ctx context.Context, js jetstream.JetStream, names protocol.Names) (streamSeqs, error) {
	var out streamSeqs
	for _, x := range []struct {
		name string
		seq  *uint64
	}{{names.ShardStream(), &out.shards}, {names.ResultStream(), &out.results}} {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s, err := js.Stream(sctx, x.name)
		cancel()
		if err != nil {
			return out, fmt.Errorf("stream %s: %w", x.name, err)
		}
		*x.seq = s.CachedInfo().State.LastSeq
	}
	return out, nil
}

// waitSeqs reads the last sequences, retrying while the server comes back.
func waitSeqs(ctx context.Context, js jetstream.JetStream, names protocol.Names, within time.Duration) (streamSeqs, error) {
	until := time.Now().Add(within)
	for {
		s, err := lastSeqs(ctx, js, names)
		if err == nil || time.Now().After(until) || ctx.Err() != nil {
			return s, err
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

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
	before, err := lastSeqs(ctx, rb.js, names)
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
	acked, err := lastSeqs(ctx, rb.js, names)
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
	after, err := waitSeqs(ctx, rb.js, names, 30*time.Second)
	if err != nil {
		return extraJob{}, fmt.Errorf("after the rollback: %w", err)
	}
	f.note("%s: store copied at results seq %d, shards seq %d; job %s submitted; %d results published and acknowledged in the next %v (results seq %d, shards seq %d); kill -9, store rolled back, restarted: results seq %d, shards seq %d",
		what, before.results, before.shards, id, rw.Seen(), tailWindow, acked.results, acked.shards, after.results, after.shards)
	lost := after.results < acked.results || after.shards < acked.shards
	switch {
	case lost:
		f.note("%s: %d acknowledged result and %d shard messages lost with the tail", what, acked.results-min(after.results, acked.results), acked.shards-min(after.shards, acked.shards))
	case rb.replicated:
		f.note("%s: the other two replicas kept every acknowledged message; the node caught up from them", what)
	default:
		f.fail(verdictError, fmt.Sprintf("%s: the rollback lost no acknowledged message (results seq %d → %d, shards %d → %d): the fault did not bite", what, acked.results, after.results, acked.shards, after.shards))
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
	we := map[string][]string{}
	for i := 1; i <= r.cfg.Workers; i++ {
		we[fmt.Sprintf("w%d", i)] = []string{"NATS_URL=" + nodes.URL((i-1)%3)}
	}
	c, err := r.rig.Start(ctx, rig.Spec{Name: "jetstream-r3", Workers: r.cfg.Workers, LeaseDuration: r.cfg.LeaseDuration,
		ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2, NATSURL: nodes.URLs(), Env: []string{"STREAM_REPLICAS=3"}, WorkerEnv: we})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	nc, err := nats.Connect(nodes.URLs(), nats.Name("chaos-r3"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	j := f.job
	id, start, err := rig.Submit(ctx, c, j)
	if err != nil {
		return err
	}
	if st, ok := rig.WaitProgress(ctx, c, id, r.cfg.At, r.cfg.Deadline); !ok || st.State.Terminal() {
		return fmt.Errorf("R3 job %s did not reach %.0f%% running (%s)", id, 100*r.cfg.At, rig.Describe(st))
	}
	leader, err := rig.StreamLeader(ctx, js, c.Names().ResultStream())
	if err != nil {
		return err
	}
	i := rig.NodeIndex(leader)
	if i < 0 || i >= len(nodes.Nodes) {
		return fmt.Errorf("results stream led by %q, not a node", leader)
	}
	rb := &rollback{f: f, c: c, js: js, np: nodes.Nodes[i], restart: func() error { return nodes.Restart(r.rig, i) }, replicated: true}
	x, err := rb.run(ctx, "R3 node "+leader+" (results stream leader)")
	if err != nil {
		return err
	}
	for _, y := range []extraJob{{id: id, start: start}, x} {
		st, ended := rig.WaitEnd(ctx, c, y.id, time.Now().Add(r.cfg.Deadline))
		switch {
		case st == nil:
			f.fail(verdictLost, fmt.Sprintf("R3 job %s unreadable", y.id))
		case !ended:
			f.fail(verdictStuck, fmt.Sprintf("R3 job %s not ended %v after the restart (%s)", y.id, r.cfg.Deadline, rig.Describe(st)))
		default:
			o := rig.Judge(rig.Outcome{ID: y.id, Start: y.start}, j, st)
			if !o.Exact {
				f.fail(verdictWrong, "R3: "+o.Problem)
			} else {
				f.note("R3 job %s exact in %.2f s", y.id, o.Makespan.Seconds())
			}
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
