package main

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
)

// quickFaults are the cheap faults `go test` runs (TestQuick). The others take longer: a longer
// job or an outage.
var quickFaults = []string{"leader-kill", "forged-result", "malformed-result", "malformed-partial", "garbage", "cancel-failover"}

// matrix is every fault, in the order the run takes them.
func matrix() []fault {
	sleepJob := func(c Config) knownjobs.Job { return c.sleepJob() }
	longSleepJob := func(c Config) knownjobs.Job { return knownjobs.Sleep(3*c.Shards, c.ShardDelay.String()) }
	primesJob := func(c Config) knownjobs.Job {
		if c.Quick {
			return c.sleepJob()
		}
		return c.primesJob()
	}
	return append([]fault{
		{name: "leader-kill", what: "the leader is killed (SIGKILL) mid-job and restarted", job: primesJob, inject: injectLeaderKill},
		{name: "leader-stop", what: "the leader is stopped (SIGSTOP) past its lease, then continued (SIGCONT): it must find itself deposed", job: sleepJob, inject: injectLeaderStop},
		{name: "nats-kill", what: "nats-server is killed (kill -9) mid-job and restarted on its port and store", job: sleepJob, inject: injectNATSKill},
		{name: "blob-kill", what: "azurite-blob is killed (kill -9) mid-job, at least 6 s after the submit, and restarted: it loses its last seconds of acknowledged writes (checkpoints), not the job's spec", job: longSleepJob, inject: injectBlobKill, minAge: 6 * time.Second},
		{name: "queue-down", what: "azurite-queue is stopped (SIGTERM) for 8 s mid-job; a second job is submitted during it", job: sleepJob, inject: injectQueueDown},
		{name: "workers-kill", what: "every worker is killed (SIGKILL) mid-job, then all are restarted", job: primesJob, inject: injectWorkersKill},
		{name: "forged-result", what: "well-formed results with the job's plan epoch and wrong partials are published by a plain NATS client", job: sleepJob, inject: injectForged, dead: map[string]int{"results": forgedCount}},
		{name: "malformed-result", what: "garbage bytes are published on the job's results subject", job: sleepJob, inject: injectMalformed, dead: map[string]int{"results": 1}},
		{name: "malformed-partial", what: "a well-formed result with the job's plan epoch whose partial is garbage is published", job: sleepJob, inject: injectMalformedPartial, dead: map[string]int{"results": 1}},
		{name: "garbage", what: "an invalid job id and a 60 KB message on the job queue, garbage on the job's shards subject", job: sleepJob, inject: injectGarbage, dead: map[string]int{"queue": 2, "shards": 1}},
		{name: "merge-panic", what: "a job whose Merge writes into a nil map runs beside the job: it must fail naming the panic; the leader must not change", job: sleepJob, inject: injectBadJob("bad-merge", "badjobs.mergeCounts"), testWorker: true},
		{name: "split-panic", what: "a job whose Split indexes past its slice runs beside the job: it must fail naming the panic; the leader must not change", job: sleepJob, inject: injectBadJob("bad-split", "badjobs.BadSplit.Split"), testWorker: true},
		{name: "follower-cut", what: "a follower is silently cut from NATS (blackholing proxy: no FIN, packets held) for 20 s: 0 leader changes, not ready during the cut", job: sleepJob, inject: injectFollowerCut},
		{name: "leader-cut", what: "the leader is silently cut from NATS for 20 s: exactly 1 leader change, and it does not take the lease back", job: sleepJob, inject: injectLeaderCut},
		{name: "forged-heartbeat", what: "heartbeats of ever higher epochs are published by a plain NATS client without the cluster key: 0 leader changes", job: sleepJob, inject: injectForgedHeartbeat, dead: map[string]int{bus.SourceControl: forgedBeats}},
		{name: "wrong-key-worker", what: "a worker with another cluster key joins mid-job: it is not ready, never leads or consumes, the job ends exact", job: sleepJob, inject: injectWrongKey},
		{name: "duplicate-id", what: "a second process starts with a live follower's WORKER_ID: it exits naming the id, 0 leader changes", job: sleepJob, inject: injectDuplicateID},
		{name: "jetstream-full", what: "the results stream refuses every message (out of space) for 150 s, then has room again, without a NATS restart: the job finishes exact", job: sleepJob, inject: injectJetStreamFull},
		{name: "replay", what: "the job's shard and result messages are recorded, and published again verbatim after it ended and nats-server restarted: no shard runs again, no write", job: sleepJob, inject: injectReplay},
		{name: "leader-queue-cut", what: "the leader is silently cut from the job queue for 40 s and a second job is submitted: it hands over once, both jobs end exact", job: sleepJob, inject: injectLeaderQueueCut},
		{name: "burst-kill", what: "20 small jobs are submitted and the leader is killed (SIGKILL) at once: every job starts within 5 s of the next election and ends exact", job: sleepJob, inject: injectBurstKill},
		{name: "cancel-failover", what: "the leader is killed and the job cancelled at once: it must end cancelled soon after the next election", job: longSleepJob, inject: injectCancelFailover, expectCancel: true},
		{name: "schedule-leader-kill", what: "a schedule firing every 2 s ticks through a leader SIGKILL: one job per tick, each exact", job: scheduleMainJob, inject: injectSchedule(injectLeaderKill)},
		{name: "schedule-leader-stop", what: "a schedule firing every 2 s ticks through a leader SIGSTOPped past its lease: one job per tick, each exact", job: scheduleMainJob, inject: injectSchedule(injectLeaderStop)},
		{name: "schedule-blob-kill", what: "a schedule firing every 2 s ticks through azurite-blob kill -9 (a rollback of tick markers, specs, state): one job per tick, each exact", job: scheduleMainJob, inject: injectSchedule(injectBlobKill)},
	}, append(append(append(jetStreamFaults(sleepJob), keyedFaults()...), chainFaults()...), healFaults(sleepJob)...)...) // jetstream.go, keyed.go, chain.go, heal.go
}

func faultNames() []string {
	var out []string
	for _, f := range matrix() {
		out = append(out, f.name)
	}
	return out
}

// selectFaults returns the faults named (all when names is empty), in matrix order.
func selectFaults(names []string) []fault {
	var out []fault
	for _, f := range matrix() {
		if len(names) == 0 || slices.Contains(names, f.name) {
			out = append(out, f)
		}
	}
	return out
}

func injectLeaderKill(ctx context.Context, f *faultRun) error {
	_, err := f.failover(ctx, nil)
	return err
}

func injectLeaderStop(ctx context.Context, f *faultRun) error {
	id, epoch, err := f.leader(ctx)
	if err != nil {
		return err
	}
	p := f.c.Proc(id)
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stopped := time.Now()
	cont := func() { _ = p.Signal(syscall.SIGCONT) }
	ev, err := rig.WaitElected(ctx, f.c, epoch, 3*f.r.cfg.LeaseDuration)
	if err != nil {
		cont()
		return err
	}
	f.note("stopped leader %s (epoch %d); %s elected (epoch %d) %.2f s later", id, epoch, ev.Worker, ev.Epoch, ev.Time.Sub(stopped).Seconds())
	// Past the lease: the stopped leader's lease has expired for certain when it wakes.
	sleep(ctx, time.Until(stopped.Add(f.r.cfg.LeaseDuration+2*time.Second)))
	cont()
	f.healed = time.Now()
	f.note("continued %s after %.1f s", id, time.Since(stopped).Seconds())
	// It must find itself deposed (say so, or exit) and never take the lease back under its old
	// term.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	dep, err := f.c.WaitEvent(wctx, func(e cluster.Event) bool {
		return e.Worker == id && e.Epoch == epoch && (e.Kind == string(election.EventLost) || e.Kind == string(election.EventSteppedDown))
	})
	cancel()
	switch {
	case err == nil:
		f.note("%s reported %q for epoch %d %.2f s after SIGCONT", id, dep.Kind, epoch, dep.Time.Sub(f.healed).Seconds())
	case !p.Running():
		f.note("%s exited after SIGCONT", id)
	default:
		f.fail(verdictNotDeposed, fmt.Sprintf("%s neither reported losing epoch %d nor exited within 10 s of SIGCONT", id, epoch))
	}
	if l, err := f.c.Leader(ctx); err == nil && l != nil && l.Epoch < ev.Epoch {
		f.fail(verdictNotDeposed, fmt.Sprintf("after SIGCONT the lease is at epoch %d, below the new leader's %d", l.Epoch, ev.Epoch))
	}
	return nil
}

func injectNATSKill(ctx context.Context, f *faultRun) error {
	if _, err := f.r.rig.RestartNATS(ctx, f.c, 2*time.Second); err != nil {
		return err
	}
	f.healed = time.Now()
	f.note("nats-server down 2 s")
	return nil
}

func injectBlobKill(ctx context.Context, f *faultRun) error {
	az := f.c.Azurite()
	if err := az.Kill(devserver.Blob, syscall.SIGKILL); err != nil {
		return err
	}
	sleep(ctx, 2*time.Second)
	if err := az.Restart(devserver.Blob); err != nil {
		return err
	}
	f.healed = time.Now()
	f.note("azurite-blob down 2 s")
	return nil
}

func injectQueueDown(ctx context.Context, f *faultRun) error {
	az := f.c.Azurite()
	// SIGTERM: Azurite's queue keeps its state in memory and saves it now and then. A kill -9
	// can lose the queue itself, and nothing can be submitted until it is created again: that is
	// a storage loss, not an outage.
	if err := az.Kill(devserver.Queue, syscall.SIGTERM); err != nil {
		return err
	}
	down := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 6*time.Second)
	err := f.submitMore(sctx)
	cancel()
	if err != nil {
		f.note("submit during the outage refused: %s", rig.Clip(err.Error(), 200))
	} else {
		f.note("submit during the outage accepted: %s", f.more[0].id)
	}
	sleep(ctx, time.Until(down.Add(8*time.Second)))
	if err := az.Restart(devserver.Queue); err != nil {
		return err
	}
	f.healed = time.Now()
	if len(f.more) == 0 { // refused: it must run when submitted again
		if err := f.submitMore(ctx); err != nil {
			return fmt.Errorf("submit after the outage: %w", err)
		}
		f.note("submitted again after the outage: %s", f.more[0].id)
	}
	return nil
}

func injectWorkersKill(ctx context.Context, f *faultRun) error {
	ids := f.c.Running()
	if err := rig.KillAll(ctx, f.c, ids, time.Second); err != nil {
		return err
	}
	f.healed = time.Now()
	f.note("killed %s", strings.Join(ids, ", "))
	return nil
}

// forgedCount is how many forged results the forged-result fault publishes.
const forgedCount = 5

// injectForged publishes well-formed results for the last forgedCount shards, not dispatched yet.
// They carry the job's plan epoch and another shard's partial: merged, they make the index sum
// wrong.
func injectForged(ctx context.Context, f *faultRun) error {
	sleepJob, err := builtin.Registry().Lookup("sleep")
	if err != nil {
		return err
	}
	shards, err := sleepJob.Split(ctx, nil, f.job.Params)
	if err != nil {
		return err
	}
	partial, err := sleepJob.Map(ctx, nil, jobs.Task{JobID: f.id, Index: 0, Attempt: 1, Shard: shards[0]}) // the partial of shard 0: (1, 0)
	if err != nil {
		return err
	}
	n := len(shards)
	var idx []int
	for k := range forgedCount {
		idx = append(idx, n-1-k)
	}
	epoch, err := f.publishResults(ctx, "chaos-forger", partial, idx...)
	if err == nil {
		f.note("published %d forged results (shards %d–%d, plan epoch %d, partial of shard 0)", forgedCount, n-forgedCount, n-1, epoch)
	}
	return err
}

// publishResults publishes, from a plain NATS client, a well-formed result with the job's plan
// epoch and partial for each shard of idx, and returns the epoch.
func (f *faultRun) publishResults(ctx context.Context, client string, partial []byte, idx ...int) (uint64, error) {
	st := rig.Status(ctx, f.c, f.id)
	if st == nil || st.PlanEpoch == 0 {
		return 0, fmt.Errorf("cannot read the job's plan epoch from its checkpoint")
	}
	var msgs []*nats.Msg
	for _, i := range idx {
		m := protocol.ResultMsg{Kind: protocol.KindAggregate, Job: f.id, Index: i, Epoch: st.PlanEpoch, Attempt: 1, Worker: "w1", Partial: partial}
		data, err := m.Encode()
		if err != nil {
			return 0, err
		}
		msgs = append(msgs, &nats.Msg{Subject: f.c.Names().ResultSubject(f.id), Data: data})
	}
	return st.PlanEpoch, rig.Publish(f.c, client, msgs...)
}

func injectMalformed(ctx context.Context, f *faultRun) error {
	subj := f.c.Names().ResultSubject(f.id)
	f.note("published garbage on %s", subj)
	return rig.Publish(f.c, "chaos-garbage", &nats.Msg{Subject: subj, Data: []byte("R\x01not a result \xff\xfe\x00garbage")})
}

// injectMalformedPartial publishes, for the job's last shard (not yet dispatched at this point),
// a well-formed result with the right plan epoch whose partial does not decode.
func injectMalformedPartial(ctx context.Context, f *faultRun) error {
	idx := f.job.Shards - 1
	epoch, err := f.publishResults(ctx, "chaos-garbage", []byte("{not a partial\xff"), idx)
	if err == nil {
		f.note("published a result for shard %d (plan epoch %d) with a garbage partial", idx, epoch)
	}
	return err
}

func injectGarbage(ctx context.Context, f *faultRun) error {
	q, err := queue.New(f.c.ConnStr, f.c.QueueName())
	if err != nil {
		return err
	}
	if err := q.Enqueue(ctx, "../not a job id!"); err != nil {
		return fmt.Errorf("enqueue an invalid id: %w", err)
	}
	if err := q.Enqueue(ctx, string(bytes.Repeat([]byte("x"), 60<<10))); err != nil {
		return fmt.Errorf("enqueue a 60 KB message: %w", err)
	}
	subj := f.c.Names().ShardTypeSubject(f.job.Type, f.id)
	f.note("enqueued an invalid id and a 60 KB message; published garbage on %s", subj)
	return rig.Publish(f.c, "chaos-garbage", &nats.Msg{Subject: subj, Data: []byte("S\x01not a shard \xff\x00")})
}

func injectCancelFailover(ctx context.Context, f *faultRun) error {
	ev, err := f.failover(ctx, func() error {
		if _, err := f.c.Client.Cancel(ctx, f.id); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		return nil
	})
	f.elected = ev.Time
	return err
}
