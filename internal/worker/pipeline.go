package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nuid"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// held is one delivery (one shard, or a batch of one job's consecutive shards) whose results are
// on their way: it is settled once every result message carrying its results is stored.
type held struct {
	d      *bus.Delivery
	shards int
	final  bool   // a shard failed for good: Term, not Ack
	reason string // why, for Term
	parts  atomic.Int32
	failed atomic.Bool
}

// outcome is one shard's result, to publish.
type outcome struct {
	h   *held
	res *protocol.ResultMsg
}

// settle is a result message in flight: the deliveries whose results it carries.
type settle struct {
	fut   bus.Future
	err   error // the publish failed at once
	helds []*held
	job   string
	out   bus.Outgoing // to publish again (same id: JetStream keeps one) after a failure
}

// Result messages carry up to this many results, or about this many bytes, of one job.
const (
	maxBatchResults = 1024
	maxBatchBytes   = 512 << 10
)

// handle runs every shard of a delivery in turn and hands their results to the publisher. A
// shard that fails (and may be retried) hands the whole delivery back; its other shards' results
// are dropped (a retry recomputes them; the leader would drop them as duplicates anyway).
func (w *Worker) handle(ctx context.Context, d *bus.Delivery, done chan<- []outcome) {
	ms, err := protocol.DecodeShards(d.Data())
	if err != nil {
		w.malformed.Add(1)
		w.log.Error("malformed shard message; dead-lettered", "subject", d.Subject(), "err", err)
		if derr := w.bus.DeadLetter(context.WithoutCancel(ctx), "shards", d.Data(), err.Error()); derr != nil {
			w.log.Error("dead-letter failed", "err", derr)
			_ = d.Nak(time.Second)
			return
		}
		_ = d.Term(err.Error())
		return
	}
	if len(ms) > 0 && !sentJustNow(d) && w.ended.is(ctx, ms[0].Job) {
		// A replay of a job that has ended: nothing to run, nothing to write.
		w.replayed.Add(int64(len(ms)))
		w.log.Debug("shards of an ended job dropped", "job", ms[0].Job, "shards", len(ms))
		_ = d.Ack()
		return
	}
	attempt := d.Attempt()
	if attempt > 1 {
		w.redelivered.Add(1)
	}
	h := &held{d: d, shards: len(ms)}
	outs := make([]outcome, 0, len(ms))
	for _, m := range ms {
		res := &protocol.ResultMsg{Kind: m.Kind, Job: m.Job, Index: m.Index, Epoch: m.Epoch, Attempt: attempt, Worker: w.cfg.ID}
		if attempt > w.cfg.MaxAttempts {
			// Every earlier attempt ended without a verdict: the worker running it died or the
			// shard outlived the shard timeout.
			res.Error = fmt.Sprintf("shard %d of job %s was delivered %d times without finishing (a worker crashed or the shard exceeded the shard timeout); the limit is %d attempts",
				m.Index, m.Job, attempt-1, w.cfg.MaxAttempts)
			w.gaveUp.Add(1)
			w.log.Warn("shard gave up", "job", m.Job, "shard", m.Index, "attempt", attempt, "reason", res.Error)
			h.final, h.reason = true, res.Error
			outs = append(outs, outcome{h: h, res: res})
			continue
		}
		partial, dur, err := w.run(ctx, attempt, m)
		res.Micros = dur.Microseconds()
		if ctx.Err() != nil {
			_ = d.Nak(0) // shutting down: let another worker take it now
			return
		}
		if errors.Is(err, errJobEnded) {
			// A keyed task of a job that ended meanwhile (keyed.go): dropped, like a replay.
			w.replayed.Add(int64(len(ms)))
			w.log.Debug("task of an ended job dropped", "job", m.Job, "shard", m.Index, "err", err)
			_ = d.Ack()
			return
		}
		if err != nil {
			w.failed.Add(1)
			if errors.Is(err, jobs.ErrPermanent) {
				// Retrying cannot help: the shard fails now, and so does its job.
				res.Error = fmt.Sprintf("shard %d of job %s failed permanently (attempt %d, not retried): %v", m.Index, m.Job, attempt, err)
				w.gaveUp.Add(1)
				w.log.Error("shard failed permanently", "job", m.Job, "shard", m.Index, "attempt", attempt, "err", err)
				h.final, h.reason = true, res.Error
				outs = append(outs, outcome{h: h, res: res})
				continue
			}
			if attempt < w.cfg.MaxAttempts {
				w.log.Warn("shard failed; will retry", "job", m.Job, "shard", m.Index, "attempt", attempt, "err", err)
				_ = d.Nak(w.cfg.RetryBackoff * time.Duration(attempt))
				return
			}
			res.Error = fmt.Sprintf("shard %d of job %s failed after %d attempts: last error: %v", m.Index, m.Job, attempt, err)
			w.gaveUp.Add(1)
			w.log.Error("shard failed for good", "job", m.Job, "shard", m.Index, "attempt", attempt, "err", err)
			h.final, h.reason = true, res.Error
			outs = append(outs, outcome{h: h, res: res})
			continue
		}
		w.observe(dur)
		if len(partial) > w.cfg.InlinePartialLimit {
			name := protocol.PartialBlob(m.Job, m.Index, attempt)
			if _, err := w.store.Put(ctx, name, partial, store.Cond{}); err != nil {
				w.log.Warn("storing large partial failed; will retry", "job", m.Job, "shard", m.Index, "err", err)
				_ = d.Nak(w.cfg.RetryBackoff)
				return
			}
			res.Ref = name
		} else {
			res.Partial = partial
		}
		outs = append(outs, outcome{h: h, res: res})
	}
	done <- outs
}

// publisher puts the results available at each moment into messages (one job each, bounded in
// count and size) until done is closed. It never waits for more results than are there.
func (w *Worker) publisher(done <-chan []outcome, settles chan<- settle) {
	var batch []outcome
	var groups [][]outcome
	for outs := range done {
		batch = append(batch[:0], outs...)
	more:
		for len(batch) < maxBatchResults {
			select {
			case outs, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, outs...)
			default:
				break more
			}
		}
		// Group by job, in order of first appearance; split by count and size.
		groups = groups[:0]
		for len(batch) > 0 {
			job := batch[0].res.Job
			var group, rest []outcome
			size := 0
			for _, o := range batch {
				n := len(o.res.Partial) + len(o.res.Error) + 64
				if o.res.Job != job || len(group) > 0 && (size+n > maxBatchBytes || len(group) == maxBatchResults) {
					rest = append(rest, o)
					continue
				}
				group = append(group, o)
				size += n
			}
			groups = append(groups, group)
			batch = rest
		}
		// Count every message a delivery's results travel in before any can be settled.
		for _, g := range groups {
			for _, h := range distinct(g) {
				h.parts.Add(1)
			}
		}
		for _, g := range groups {
			w.publish(g, settles)
		}
	}
}

func distinct(g []outcome) []*held {
	var hs []*held
	for i, o := range g {
		if i == 0 || o.h != g[i-1].h { // a delivery's results are adjacent
			hs = append(hs, o.h)
		}
	}
	return hs
}

// publish starts storing one job's results in one message and queues its deliveries to be
// settled when it is stored.
func (w *Worker) publish(g []outcome, settles chan<- settle) {
	rs := make([]*protocol.ResultMsg, len(g))
	for i, o := range g {
		rs[i] = o.res
	}
	r0 := rs[0]
	// A result message is never re-published (a failure redelivers its shards), so a unique id
	// suffices. And it must be unique: a shard dispatched again by self-repair runs as attempt 1
	// again. An id from (job, index, attempt) would make JetStream drop its result as a duplicate
	// of the lost one.
	id := protocol.ResultBatchMsgID(r0.Job, nuid.Next())
	data, err := protocol.EncodeResults(rs)
	s := settle{helds: distinct(g), job: r0.Job}
	if err != nil {
		w.log.Warn("encoding results failed; shards will be redelivered", "job", r0.Job, "results", len(rs), "err", err)
		w.resolve(s, false)
		return
	}
	s.out = bus.Outgoing{Subject: w.bus.ResultSubject(r0.Job), MsgID: id, Data: data}
	s.fut, s.err = w.bus.Publish(s.out) // a failure is retried by settle
	settles <- s
}

// settle waits for a message to be stored and settles the deliveries it completes. A failed
// publish (JetStream out of space, NATS away) is retried with backoff while the shards stay held
// and kept alive: an outage does not use up their attempts, and results flow again by themselves
// once the server takes them. Only stopping hands the shards back.
func (w *Worker) settle(ctx context.Context, s settle) {
	backoff := 100 * time.Millisecond
	for failing := false; ; {
		err := s.err
		if err == nil {
			err = s.fut.Wait()
		}
		switch {
		case err == nil:
			if failing {
				w.log.Info("results published again", "job", s.job)
			}
			w.pubErr.Store(nil)
			w.resolve(s, true)
			return
		case ctx.Err() != nil:
			w.log.Warn("publishing results failed while stopping; shards will be redelivered", "job", s.job, "err", err)
			w.resolve(s, false)
			return
		case !failing:
			w.log.Warn("publishing results failed; retrying while the shards stay held", "job", s.job, "err", err)
			failing = true
		}
		w.publishRetries.Add(1)
		w.pubErr.Store(&err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 5*time.Second)
		s.fut, s.err = w.bus.Publish(s.out)
	}
}

// resolve records one message's outcome for each of its deliveries, and settles those whose
// every message is resolved: Ack (or Term, for a shard that failed for good) when all were
// stored, else Nak for redelivery.
func (w *Worker) resolve(s settle, stored bool) {
	for _, h := range s.helds {
		if !stored {
			h.failed.Store(true)
		}
		if h.parts.Add(-1) != 0 {
			continue
		}
		switch {
		case h.failed.Load():
			_ = h.d.Nak(w.cfg.RetryBackoff)
		case h.final:
			_ = h.d.Term(h.reason)
		default:
			w.succeeded.Add(int64(h.shards))
			_ = h.d.Ack()
		}
	}
}
