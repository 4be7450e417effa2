package main

// The trust faults: silent partitions through a fault proxy, forged control messages and
// misconfigured workers. Each counts the leader changes it caused (the lease blob's epoch) and
// fails with verdictChurn when they differ from what the fault allows.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// verdictChurn: the fault changed the leader more often than it may.
const verdictChurn = "CHURN"

// cutFor is how long a partition lasts.
func (f *faultRun) cutFor() time.Duration {
	if f.r.cfg.Quick {
		return 8 * time.Second
	}
	return 20 * time.Second
}

// changes checks the leader changes since epoch0 against want.
func (f *faultRun) changes(ctx context.Context, epoch0 uint64, want int) {
	_, epoch, err := f.leader(ctx)
	if err != nil {
		f.fail(verdictError, err.Error())
		return
	}
	n := int(epoch - epoch0)
	f.changesSeen = &n
	f.note("%d leader changes (epochs %d → %d)", n, epoch0, epoch)
	if n != want {
		f.fail(verdictChurn, fmt.Sprintf("%d leader changes, want %d", n, want))
	}
}

// injectFollowerCut cuts a follower silently from NATS for cutFor. No leader may change, and the
// follower reports not ready during the cut and ready again after it.
func injectFollowerCut(ctx context.Context, f *faultRun) error {
	p, px, err := f.r.rig.Proxied(ctx, f.c, "wcut", rig.NATSLink)
	if err != nil {
		return err
	}
	defer px.Close()
	defer p.Stop()
	addr := f.c.HTTPAddr("wcut")
	sleep(ctx, 2*time.Second) // it hears the leader
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	px.Blackhole()
	f.note("follower wcut cut off silently for %v", f.cutFor())
	if took, ok := rig.WaitReady(ctx, addr, http.StatusServiceUnavailable, 5*time.Second); ok {
		f.note("wcut not ready %.2f s into the cut", took.Seconds())
	} else {
		f.fail(verdictWrong, "a cut-off follower kept reporting ready")
	}
	sleep(ctx, f.cutFor()-time.Second)
	px.Heal()
	f.healed = time.Now()
	if took, ok := rig.WaitReady(ctx, addr, http.StatusOK, 15*time.Second); ok {
		f.note("wcut ready again %.2f s after the heal", took.Seconds())
	} else {
		f.fail(verdictWrong, "wcut not ready 15 s after the heal")
	}
	sleep(ctx, 2*time.Second)
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectLeaderCut makes a proxied worker the leader, then cuts it silently from NATS for
// cutFor: exactly one leader change, and the cut-off worker does not lead again.
func injectLeaderCut(ctx context.Context, f *faultRun) error {
	epoch0, done, err := f.cutLeader(ctx, "wcut", rig.NATSLink, f.cutFor(), nil)
	if err != nil {
		return err
	}
	defer done()
	sleep(ctx, 5*time.Second)
	if l, _, err := f.leader(ctx); err == nil && l == "wcut" {
		f.fail(verdictChurn, "the cut-off leader took the lease back")
	}
	f.changes(ctx, epoch0, 1)
	return nil
}

// injectLeaderQueueCut makes a worker whose link to the job queue goes through a fault proxy the
// leader. It cuts that link silently for 40 s and submits a second job meanwhile. The leader
// must hand over (exactly one change) and the second job must run and end exact.
func injectLeaderQueueCut(ctx context.Context, f *faultRun) error {
	epoch0, done, err := f.cutLeader(ctx, "wq", rig.QueueLink, 40*time.Second, func() error { return f.submitMore(ctx) })
	if err != nil {
		return err
	}
	defer done()
	sleep(ctx, 3*time.Second)
	f.changes(ctx, epoch0, 1)
	return nil
}

// cutLeader makes worker id, whose link goes through a fault proxy, the leader. It cuts that link
// silently for cut, calls during (if any), and heals it; another worker must be elected during
// the cut. It returns the cut-off leader's epoch, and done, which stops the worker and its proxy.
func (f *faultRun) cutLeader(ctx context.Context, id string, link rig.Link, cut time.Duration, during func() error) (epoch0 uint64, done func(), err error) {
	p, px, err := f.r.rig.Proxied(ctx, f.c, id, link)
	if err != nil {
		return 0, nil, err
	}
	done = func() { p.Stop(); _ = px.Close() }
	defer func() {
		if err != nil {
			done()
		}
	}()
	if err := rig.HandTo(ctx, f.c, id); err != nil {
		return 0, nil, err
	}
	if _, epoch0, err = f.leader(ctx); err != nil {
		return 0, nil, err
	}
	px.Blackhole()
	start := time.Now()
	f.note("leader %s (epoch %d) cut off silently for %v", id, epoch0, cut)
	if during != nil {
		if err := during(); err != nil {
			return 0, nil, err
		}
	}
	if ev, err := rig.WaitElected(ctx, f.c, epoch0, cut); err == nil {
		f.note("%s elected (epoch %d) %.2f s into the cut", ev.Worker, ev.Epoch, ev.Time.Sub(start).Seconds())
	} else {
		f.fail(verdictNotDeposed, "the cut-off leader was not replaced during the cut")
	}
	sleep(ctx, time.Until(start.Add(cut)))
	px.Heal()
	f.healed = time.Now()
	return epoch0, done, nil
}

// forgedBeats is how many forged heartbeats injectForgedHeartbeat publishes.
const forgedBeats = 20

// injectForgedHeartbeat publishes heartbeats of ever higher epochs without the cluster key. No
// leader may change, and each is dead-lettered.
func injectForgedHeartbeat(ctx context.Context, f *faultRun) error {
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	subject := f.c.Names().Control(bus.CtlHeartbeat)
	for i := range forgedBeats {
		data, err := bus.EncodeBeat(election.Beat{Epoch: epoch0 + 1000 + uint64(i), Identity: "forger", Seq: uint64(i + 1), Sent: time.Now()})
		if err != nil {
			return err
		}
		if err := rig.Publish(f.c, "chaos-forger", &nats.Msg{Subject: subject, Data: data}); err != nil {
			return err
		}
		sleep(ctx, 250*time.Millisecond)
	}
	f.healed = time.Now()
	sleep(ctx, 4*time.Second) // well past the suspicion timeout
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectWrongKey starts a worker with another cluster key mid-job: it must take itself out (not
// ready, never leads, processes nothing), and the job ends exact.
func injectWrongKey(ctx context.Context, f *faultRun) error {
	k, err := bus.GenerateKey()
	if err != nil {
		return err
	}
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	p, err := f.r.rig.Extra(f.c, "wkey", "CLUSTER_KEY="+k.Encode())
	if err != nil {
		return err
	}
	defer p.Stop()
	f.healed = time.Now()
	if err := rig.WaitMember(ctx, f.c, "wkey", time.Minute); err != nil {
		return err
	}
	if _, ok := rig.WaitReady(ctx, f.c.HTTPAddr("wkey"), http.StatusServiceUnavailable, 15*time.Second); !ok {
		f.fail(verdictWrong, "a wrong-key worker reports ready")
	}
	// It stays while the job runs to its end.
	rig.WaitEnd(ctx, f.c, f.id, time.Now().Add(f.r.cfg.Deadline))
	log := p.Log()
	switch {
	case !strings.Contains(log, `"msg":"wrong cluster key"`):
		f.fail(verdictWrong, "the wrong-key worker did not say what is wrong")
	case strings.Contains(log, `"msg":"elected"`):
		f.fail(verdictChurn, "the wrong-key worker led")
	case strings.Contains(log, `"msg":"processing shards"`):
		f.fail(verdictWrong, "the wrong-key worker consumed shards")
	default:
		f.note("wkey refused to lead and consume, and said why")
	}
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectDuplicateID starts a second process with a live follower's id: it must exit naming the
// id, and no leader may change.
func injectDuplicateID(ctx context.Context, f *faultRun) error {
	leader, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(f.c.Running(), func(id string) bool { return id != leader })
	if i < 0 {
		return fmt.Errorf("no follower to copy the id of")
	}
	dup := f.c.Running()[i]
	p, err := f.r.rig.Extra(f.c, dup)
	if err != nil {
		return err
	}
	select {
	case <-p.Exited():
	case <-time.After(30 * time.Second):
		p.Stop()
		f.fail(verdictWrong, fmt.Sprintf("a second process with id %s did not exit within 30 s", dup))
	}
	f.healed = time.Now()
	if p.Err() == nil || !strings.Contains(p.Log(), fmt.Sprintf(`worker id \"%s\" is used by a live process`, dup)) {
		f.fail(verdictWrong, fmt.Sprintf("the second %s: exit %v, and its log does not name the id", dup, p.Err()))
	} else {
		f.note("the second %s exited (%v) naming the id", dup, p.Err())
	}
	sleep(ctx, 2*time.Second)
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectJetStreamFull makes the results stream refuse every message (out of space) for a while,
// then frees it, without restarting nats-server. The job must finish exact (publish failures use
// up no attempts), and the workers report not ready meanwhile.
func injectJetStreamFull(ctx context.Context, f *faultRun) error {
	full := 150 * time.Second
	if f.r.cfg.Quick {
		full = 10 * time.Second
	}
	restore, err := rig.UpdateStream(ctx, f.c, f.c.Names().ResultStream(), func(c *jetstream.StreamConfig) {
		c.MaxBytes, c.Discard = 1, jetstream.DiscardNew
	})
	if err != nil {
		return err
	}
	f.note("results stream full (1 byte, discard new) for %v", full)
	unready, announced := 0, 0
	until := time.Now().Add(full)
	for time.Now().Before(until) && ctx.Err() == nil {
		sleep(ctx, 2*time.Second)
		unready, announced = 0, 0
		for _, id := range f.c.Running() {
			if addr := f.c.HTTPAddr(id); addr != "" && rig.Readyz(addr) == http.StatusServiceUnavailable {
				unready++
			}
		}
		for _, m := range f.c.Members() { // what `worker workers` and the dashboard show
			if slices.ContainsFunc(m.Problems, func(p string) bool { return strings.HasPrefix(p, "results: ") }) {
				announced++
			}
		}
	}
	if err := restore(); err != nil {
		return fmt.Errorf("free the results stream: %w", err)
	}
	f.healed = time.Now()
	f.note("%d workers not ready at the end of the outage (%d announced it); space freed without a NATS restart", unready, announced)
	if unready == 0 {
		f.fail(verdictWrong, "no worker reported the full stream in /readyz")
	}
	if announced == 0 {
		f.fail(verdictWrong, "no worker announced the full stream as a problem (worker workers, dashboard)")
	}
	return nil
}

// injectReplay records the job's shard and result messages: those in the shards stream and those
// a plain NATS client sees from the fault on. It lets the job finish and restarts nats-server,
// which forgets the acknowledged messages' ids. Then it publishes every recorded message again,
// verbatim (genuine MACs): no shard may run again and the job's result may not be written again.
func injectReplay(ctx context.Context, f *faultRun) error {
	names := f.c.Names()
	rec, err := rig.Record(ctx, f.c, []string{names.ShardSubject(f.id), names.ResultSubject(f.id)}, names.ShardStream(), "."+f.id)
	if err != nil {
		return err
	}
	st, ended := rig.WaitEnd(ctx, f.c, f.id, time.Now().Add(f.r.cfg.Deadline))
	msgs := rec.Stop()
	if st == nil || !ended || st.State != jobs.StateSucceeded {
		return fmt.Errorf("the job did not succeed before the replay (%s)", rig.Describe(st))
	}
	executed := rig.SumMetric(f.c, "mapagg_shards_executed_total")
	if _, err := f.r.rig.RestartNATS(ctx, f.c, 0); err != nil {
		return err
	}
	sleep(ctx, 3*time.Second) // the workers reconnect
	// Past the duplicate window: shrink it to 1 s for the replay (restored after).
	for _, name := range []string{names.ShardStream(), names.ResultStream()} {
		restore, err := rig.UpdateStream(ctx, f.c, name, func(c *jetstream.StreamConfig) { c.Duplicates = time.Second })
		if err != nil {
			return fmt.Errorf("shrink the duplicate window: %w", err)
		}
		defer func() { _ = restore() }()
	}
	sleep(ctx, 2*time.Second)
	// The job's end as stored (its clean-up long done): its final checkpoint, and its result copy
	// if it has one (a small value has none). Neither may be written again.
	ended0, err := endedETags(ctx, f)
	if err != nil {
		return err
	}
	published, dups := 0, 0
	for _, m := range msgs {
		if ack, err := rig.JetStream(f.c).PublishMsg(ctx, m); err == nil {
			published++
			if ack.Duplicate {
				dups++
			}
		}
	}
	f.healed = time.Now()
	f.note("nats-server restarted, duplicate window passed; %d of %d recorded shard and result messages published again (%d taken as duplicates)", published, len(msgs), dups)
	sleep(ctx, 8*time.Second)
	if n := rig.SumMetric(f.c, "mapagg_shards_executed_total") - executed; n != 0 {
		f.fail(verdictWrong, fmt.Sprintf("%.0f shards of the ended job ran again", n))
	}
	replayed := rig.SumMetric(f.c, "mapagg_shards_replayed_total")
	f.note("%.0f replayed shards dropped before running", replayed)
	if replayed == 0 && published > dups {
		f.fail(verdictWrong, "no replayed shard reached a worker: the fault did not replay")
	}
	if ended1, err := endedETags(ctx, f); err != nil || ended1 != ended0 {
		f.fail(verdictWrong, fmt.Sprintf("the ended job's final checkpoint or result was written again (%v)", err))
	} else {
		f.note("the final checkpoint and the result untouched")
	}
	return nil
}

// endedETags returns the ETags of the job's checkpoint and of its result copy ("" if it has none).
func endedETags(ctx context.Context, f *faultRun) ([2]store.ETag, error) {
	var out [2]store.ETag
	_, etag, err := rig.JobStore(f.c).Get(ctx, protocol.CheckpointBlob(f.id))
	if err != nil {
		return out, fmt.Errorf("read the checkpoint: %w", err)
	}
	out[0] = etag
	if _, etag, err = rig.JobStore(f.c).Get(ctx, protocol.ResultBlob(f.id)); err == nil {
		out[1] = etag
	} else if !errors.Is(err, store.ErrNotFound) {
		return out, fmt.Errorf("read the result: %w", err)
	}
	return out, nil
}

// burstJobs is how many jobs injectBurstKill submits.
const burstJobs = 20

// injectBurstKill submits a burst of small jobs and kills the leader (SIGKILL) at once. Every job
// must start (its first checkpoint) within 5 s of the next election, and end exact.
func injectBurstKill(ctx context.Context, f *faultRun) error {
	small := knownjobs.Sleep(4, "50ms")
	var ids []string
	for range burstJobs {
		id, err := f.c.Client.Submit(ctx, small.Type, small.Params)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	ev, err := f.failover(ctx, nil)
	if err != nil {
		return err
	}
	var latest time.Duration
	for _, id := range ids {
		st, ended := rig.WaitEnd(ctx, f.c, id, time.Now().Add(f.r.cfg.Deadline))
		switch {
		case st == nil || !ended:
			f.fail(verdictStuck, fmt.Sprintf("burst job %s did not end", id))
			continue
		case st.State != jobs.StateSucceeded || small.Check(st.Result) != nil:
			f.fail(verdictWrong, fmt.Sprintf("burst job %s ended %s, not exact", id, st.State))
			continue
		}
		data, _, err := rig.JobStore(f.c).Get(ctx, protocol.CheckpointBlob(id))
		if err != nil {
			continue
		}
		if cp, err := protocol.DecodeCheckpoint(data); err == nil {
			latest = max(latest, cp.StartedAt.Sub(ev.Time))
		}
	}
	f.note("%d jobs submitted; the last started %.2f s after the election", burstJobs, latest.Seconds())
	if latest > 5*time.Second {
		f.fail(verdictSlow, fmt.Sprintf("a burst job started %.1f s after the election, want within 5 s", latest.Seconds()))
	}
	return nil
}
