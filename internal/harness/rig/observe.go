package rig

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/precise"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Sample is one reading of a job's checkpoint.
type Sample struct {
	T     time.Time
	Done  int
	Total int
	State jobs.State
	// Writer is the epoch of the leader that wrote the checkpoint.
	Writer uint64
}

// Sampler polls a job's status until stopped, keeping every reading: the progress line of the
// timeline and the trigger for kills.
type Sampler struct {
	c       *cluster.Cluster
	job     string
	mu      sync.Mutex
	samples []Sample
	changed chan struct{} // closed and replaced on every new Sample
	stop    context.CancelFunc
	done    chan struct{}
}

func StartSampler(ctx context.Context, c *cluster.Cluster, job string, every time.Duration) *Sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &Sampler{c: c, job: job, changed: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	jobsC := store.New(c.Blob(), c.JobsContainer())
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			// The checkpoint alone (client.Status reads the spec too): one request per reading.
			data, _, err := jobsC.Get(ctx, protocol.CheckpointBlob(job))
			if err == nil {
				if cp, err := protocol.DecodeCheckpoint(data); err == nil {
					s.add(Sample{T: time.Now(), Done: cp.DoneCount, Total: cp.Total, State: cp.State, Writer: cp.WriterEpoch})
					if cp.State.Terminal() {
						return
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *Sampler) add(x Sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, x)
	close(s.changed)
	s.changed = make(chan struct{})
}

// last returns the latest Sample and a channel closed when the next one arrives.
func (s *Sampler) Last() (Sample, bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return Sample{}, false, s.changed
	}
	return s.samples[len(s.samples)-1], true, s.changed
}

// waitFor blocks until a Sample satisfies ok (true), the Sampler ends (false) or ctx ends.
func (s *Sampler) WaitFor(ctx context.Context, ok func(Sample) bool) (Sample, bool, error) {
	for {
		x, have, ch := s.Last()
		if have && ok(x) {
			return x, true, nil
		}
		select {
		case <-ch:
		case <-s.done:
			x, have, _ = s.Last()
			return x, have && ok(x), nil
		case <-ctx.Done():
			return x, false, ctx.Err()
		}
	}
}

// Await waits, within jctx, for the job to end and judges it as j. It is lost when it did not
// end in time; what names the run in that problem. ctx ending is an error.
func (s *Sampler) Await(ctx, jctx context.Context, j knownjobs.Job, start time.Time, what string) (Outcome, error) {
	last, ended, err := s.WaitFor(jctx, func(x Sample) bool { return x.State.Terminal() })
	if err != nil && ctx.Err() != nil {
		return Outcome{}, ctx.Err()
	}
	o := Outcome{ID: s.job, Start: start}
	if !ended {
		o.Lost, o.Problem = true, fmt.Sprintf("%s job %s not finished (%s, %d of %d merged)", what, s.job, last.State, last.Done, last.Total)
		return o, nil
	}
	st, err := Final(ctx, s.c, s.job)
	if err != nil {
		return Outcome{}, err
	}
	return Judge(o, j, st), nil
}

// Until lists the samples taken up to t, in order.
func (s *Sampler) Until(t time.Time) []Sample {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Sample
	for _, x := range s.samples {
		if !x.T.After(t) {
			out = append(out, x)
		}
	}
	return out
}

// Done is closed when the sampler stops (the job ended, or Close).
func (s *Sampler) Done() <-chan struct{} { return s.done }

// Close stops polling and returns every sample.
func (s *Sampler) Close() []Sample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// ResultObs is one result message seen on the wire.
type ResultObs struct {
	T       time.Time
	Index   int
	Attempt int
	Worker  string
	Micros  int64 // the map step's run time
}

// Sniffer watches a cluster's result and shard subjects on core NATS: JetStream stores what is
// published to a stream's subjects, and a plain subscriber sees the same messages. It shows
// every completed execution (result: shard, attempt, worker) and every dispatch publish (even
// one JetStream then drops as a duplicate), without touching the streams or consumers.
type Sniffer struct {
	mu         sync.Mutex
	results    map[string][]ResultObs  // job → results in arrival order
	dispatches map[string]map[int]int  // job → shard → publishes
	backups    map[string]map[int]bool // job → shards published as backup copies (coordinator/backup.go)
	subs       []*nats.Subscription
	nc         *nats.Conn
}

// StartSniffed starts a cluster for s with a Sniffer on it; stop closes both.
func (r *Rig) StartSniffed(ctx context.Context, s Spec) (*cluster.Cluster, *Sniffer, func(), error) {
	c, err := r.Start(ctx, s)
	if err != nil {
		return nil, nil, nil, err
	}
	sn, err := StartSniffer(c)
	if err != nil {
		r.Stop(c)
		return nil, nil, nil, err
	}
	return c, sn, func() { sn.Close(); r.Stop(c) }, nil
}

// StartSniffer subscribes to every shard and result message of c.
func StartSniffer(c *cluster.Cluster) (*Sniffer, error) {
	nc := c.Bus.Conn()
	s := &Sniffer{results: map[string][]ResultObs{}, dispatches: map[string]map[int]int{}, backups: map[string]map[int]bool{}, nc: nc}
	rs, err := nc.Subscribe(c.Bus.ResultSubject(">"), func(m *nats.Msg) {
		now := time.Now()
		rs, err := protocol.DecodeResults(m.Data)
		if err != nil {
			return
		}
		s.mu.Lock()
		for _, r := range rs {
			s.results[r.Job] = append(s.results[r.Job], ResultObs{T: now, Index: r.Index, Attempt: r.Attempt, Worker: r.Worker, Micros: r.Micros})
		}
		s.mu.Unlock()
	})
	if err != nil {
		return nil, fmt.Errorf("watch results: %w", err)
	}
	s.subs = append(s.subs, rs)
	ss, err := nc.Subscribe(c.Bus.ShardSubject(">"), func(m *nats.Msg) {
		ms, err := protocol.DecodeShards(m.Data)
		if err != nil {
			return
		}
		// A backup copy's Nats-Msg-Id is <job>/<shard>/backup/… (protocol.BackupShardMsgID).
		backup := strings.Contains(m.Header.Get(jetstream.MsgIDHeader), "/backup")
		s.mu.Lock()
		for _, r := range ms {
			d := s.dispatches[r.Job]
			if d == nil {
				d = map[int]int{}
				s.dispatches[r.Job] = d
			}
			d[r.Index]++
			if backup {
				b := s.backups[r.Job]
				if b == nil {
					b = map[int]bool{}
					s.backups[r.Job] = b
				}
				b[r.Index] = true
			}
		}
		s.mu.Unlock()
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("watch shards: %w", err)
	}
	s.subs = append(s.subs, ss)
	for _, sub := range s.subs {
		_ = sub.SetPendingLimits(-1, -1)
	}
	return s, nc.Flush()
}

// Take returns and forgets what was seen of job (after a flush, so nothing in flight is missed).
func (s *Sniffer) Take(job string) ([]ResultObs, map[int]int) {
	_ = s.nc.FlushTimeout(2 * time.Second)
	time.Sleep(20 * time.Millisecond) // let the subscription handlers drain what the flush let in
	s.mu.Lock()
	defer s.mu.Unlock()
	r, d := s.results[job], s.dispatches[job]
	delete(s.results, job)
	delete(s.dispatches, job)
	return r, d
}

// backupsOf returns and forgets the shards of job published as backup copies (call it after
// take, which flushes).
func (s *Sniffer) BackupsOf(job string) map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.backups[job]
	delete(s.backups, job)
	return b
}

func (s *Sniffer) Close() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
}

// ResultWatch counts a cluster's result messages on the wire, as a core NATS subscriber. Reached
// closes at the n-th: a trigger for a fault that does not wait for the next checkpoint.
type ResultWatch struct {
	seen    atomic.Int64
	reached chan struct{}
	once    sync.Once
	sub     *nats.Subscription
}

func WatchResults(c *cluster.Cluster, n int) (*ResultWatch, error) {
	w := &ResultWatch{reached: make(chan struct{})}
	sub, err := c.Bus.Conn().Subscribe(c.Bus.ResultSubject(">"), func(msg *nats.Msg) {
		if rs, err := protocol.DecodeResults(msg.Data); err == nil && int(w.seen.Add(int64(len(rs)))) >= n {
			w.once.Do(func() { close(w.reached) })
		}
	})
	if err != nil {
		return nil, fmt.Errorf("watch results: %w", err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	w.sub = sub
	return w, c.Bus.Conn().Flush()
}

func (w *ResultWatch) Stop() { _ = w.sub.Unsubscribe() }

// Reached is closed when n results were seen.
func (w *ResultWatch) Reached() <-chan struct{} { return w.reached }

// Seen is how many results were seen so far.
func (w *ResultWatch) Seen() int { return int(w.seen.Load()) }

// LeaseWatch polls a cluster's lease blob (in storage, so it sees through a NATS outage) and
// records every term it sees.
type LeaseWatch struct {
	mu     sync.Mutex
	terms  []election.LeaderInfo
	cancel context.CancelFunc
	done   chan struct{}
}

func WatchLease(ctx context.Context, c *cluster.Cluster) *LeaseWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &LeaseWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if l, err := c.Leader(ctx); err == nil && l != nil {
				w.mu.Lock()
				if n := len(w.terms); n == 0 || w.terms[n-1].Epoch != l.Epoch {
					w.terms = append(w.terms, *l)
				}
				w.mu.Unlock()
			}
			if Sleep(ctx, 100*time.Millisecond) != nil {
				return
			}
		}
	}()
	return w
}

// stop ends the watch and returns the terms seen, in order.
func (w *LeaseWatch) Stop() []election.LeaderInfo {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.terms
}

// CountEvents counts c's events of kind between from and to.
func CountEvents(c *cluster.Cluster, kind string, from, to time.Time, after uint64) int {
	n := 0
	for _, e := range c.Events() {
		if e.Kind == kind && !e.Time.Before(from) && !e.Time.After(to) && e.Epoch > after {
			n++
		}
	}
	return n
}

// Changes is how many leader changes a run saw: new terms in the lease blob after the first, or
// elected events of a later epoch, whichever is more. Events published during a NATS outage may
// never arrive, and a term shorter than a lease poll is missed by the blob.
func Changes(c *cluster.Cluster, terms []election.LeaderInfo, from, to time.Time) int {
	if len(terms) == 0 {
		return 0
	}
	return max(len(terms)-1, CountEvents(c, cluster.Elected, from, to, terms[0].Epoch))
}

// Sleep waits d or until ctx ends, and returns ctx's error if it ended.
func Sleep(ctx context.Context, d time.Duration) error { return precise.TimerSleep(ctx, d) }

// Every calls fn now and then every d until ctx ends or stop is called. stop waits for fn's
// last call to return.
func Every(ctx context.Context, d time.Duration, fn func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			fn(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// Elections lists c's elections between from and to.
func Elections(c *cluster.Cluster, from, to time.Time) []cluster.Event {
	var out []cluster.Event
	for _, e := range c.Events() {
		if e.Kind == cluster.Elected && e.Time.After(from) && e.Time.Before(to) {
			out = append(out, e)
		}
	}
	return out
}

// WaitFirstMerge waits for the first merge of the term epoch. The new leader may have nothing to
// merge, so the wait also ends half a second after ended closes (its event may still be on its
// way). An ended ctx looks once.
func WaitFirstMerge(ctx context.Context, c *cluster.Cluster, epoch uint64, ended <-chan struct{}) (cluster.Event, bool) {
	var giveUp <-chan time.Time
	for {
		for _, e := range c.Events() {
			if e.Kind == cluster.FirstMerge && e.Epoch == epoch {
				return e, true
			}
		}
		select {
		case <-ended:
			ended, giveUp = nil, time.After(500*time.Millisecond)
		case <-giveUp:
			return cluster.Event{}, false
		case <-ctx.Done():
			return cluster.Event{}, false
		case <-time.After(20 * time.Millisecond):
		}
	}
}
