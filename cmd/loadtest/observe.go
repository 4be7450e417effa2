package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// jobsContainer is the name of c's jobs container (see cluster.Options.Namespace).
func jobsContainer(c *cluster.Cluster) string {
	if ns := c.Options().Namespace; ns != "" {
		return ns + "-jobs"
	}
	return "jobs"
}

// sample is one reading of a job's checkpoint.
type sample struct {
	T     time.Time
	Done  int
	Total int
	State jobs.State
}

// sampler polls a job's status until stopped, keeping every reading: the progress line of the
// timeline and the trigger for kills.
type sampler struct {
	mu      sync.Mutex
	samples []sample
	changed chan struct{} // closed and replaced on every new sample
	stop    context.CancelFunc
	done    chan struct{}
}

func startSampler(ctx context.Context, c *cluster.Cluster, job string, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{changed: make(chan struct{}), stop: cancel, done: make(chan struct{})}
	jobsC := store.New(c.Blob(), jobsContainer(c))
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			// The checkpoint alone (client.Status reads the spec too): one request per reading.
			data, _, err := jobsC.Get(ctx, protocol.CheckpointBlob(job))
			if err == nil {
				if cp, err := protocol.DecodeCheckpoint(data); err == nil {
					s.add(sample{T: time.Now(), Done: cp.DoneCount, Total: cp.Total, State: cp.State})
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

func (s *sampler) add(x sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, x)
	close(s.changed)
	s.changed = make(chan struct{})
}

// last returns the latest sample and a channel closed when the next one arrives.
func (s *sampler) last() (sample, bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return sample{}, false, s.changed
	}
	return s.samples[len(s.samples)-1], true, s.changed
}

// waitFor blocks until a sample satisfies ok (true), the sampler ends (false) or ctx ends.
func (s *sampler) waitFor(ctx context.Context, ok func(sample) bool) (sample, bool, error) {
	for {
		x, have, ch := s.last()
		if have && ok(x) {
			return x, true, nil
		}
		select {
		case <-ch:
		case <-s.done:
			x, have, _ = s.last()
			return x, have && ok(x), nil
		case <-ctx.Done():
			return x, false, ctx.Err()
		}
	}
}

// close stops polling and returns every sample.
func (s *sampler) close() []sample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

// resultObs is one result message seen on the wire.
type resultObs struct {
	T       time.Time
	Index   int
	Attempt int
	Worker  string
	Micros  int64 // the map step's run time
}

// sniffer watches a cluster's result and shard subjects on core NATS: JetStream stores what is
// published to a stream's subjects, and a plain subscriber sees the same messages. It shows
// every completed execution (result: shard, attempt, worker) and every dispatch publish (even
// one JetStream then drops as a duplicate), without touching the streams or consumers.
type sniffer struct {
	mu         sync.Mutex
	results    map[string][]resultObs  // job → results in arrival order
	dispatches map[string]map[int]int  // job → shard → publishes
	backups    map[string]map[int]bool // job → shards published as backup copies (coordinator/backup.go)
	subs       []*nats.Subscription
	nc         *nats.Conn
}

func startSniffer(c *cluster.Cluster) (*sniffer, error) {
	nc := c.Bus.Conn()
	s := &sniffer{results: map[string][]resultObs{}, dispatches: map[string]map[int]int{}, backups: map[string]map[int]bool{}, nc: nc}
	rs, err := nc.Subscribe(c.Bus.ResultSubject(">"), func(m *nats.Msg) {
		now := time.Now()
		rs, err := protocol.DecodeResults(m.Data)
		if err != nil {
			return
		}
		s.mu.Lock()
		for _, r := range rs {
			s.results[r.Job] = append(s.results[r.Job], resultObs{T: now, Index: r.Index, Attempt: r.Attempt, Worker: r.Worker, Micros: r.Micros})
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
		s.close()
		return nil, fmt.Errorf("watch shards: %w", err)
	}
	s.subs = append(s.subs, ss)
	for _, sub := range s.subs {
		_ = sub.SetPendingLimits(-1, -1)
	}
	return s, nc.Flush()
}

// take returns and forgets what was seen of job (after a flush, so nothing in flight is missed).
func (s *sniffer) take(job string) ([]resultObs, map[int]int) {
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
func (s *sniffer) backupsOf(job string) map[int]bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.backups[job]
	delete(s.backups, job)
	return b
}

func (s *sniffer) close() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
}

// process identifies one run of a worker process: its id and when it was killed. A worker
// restarted under the same id is a different process.
type victim struct {
	worker string
	exited time.Time
}

// redo classifies the results of one job after kills.
type redo struct {
	redelivered    int // shards with a result of attempt > 1
	completedTwice int // shards with more than one result
	redone         int // shards in either set
	completedRerun int // shards first completed by a process that was not killed, then run again
	redispatched   int // shard publishes beyond the first
	backedUp       int // shards the leader backed up (run twice on purpose: not counted above)
	results        int
}

// classify counts shards run more than once. A result published by a killed process before it
// exited may be followed by another (the process died before acking the shard); any other
// shard with a second result, or a second delivery after a completed result, was re-run after
// it had been completed, which must not happen — unless the leader backed the shard up (backup
// tasks run a straggling shard twice on purpose): those are counted apart.
func classify(results []resultObs, dispatches map[int]int, backups map[int]bool, victims []victim) redo {
	var r redo
	r.results = len(results)
	type key struct{ index, attempt int }
	seen := map[key]bool{}
	byShard := map[int][]resultObs{}
	for _, o := range results {
		k := key{o.Index, o.Attempt}
		if seen[k] { // the same result published twice (a retried publish): one execution
			continue
		}
		seen[k] = true
		byShard[o.Index] = append(byShard[o.Index], o)
	}
	fromVictim := func(o resultObs) bool {
		for _, v := range victims {
			if o.Worker == v.worker && !o.T.After(v.exited.Add(50*time.Millisecond)) {
				return true
			}
		}
		return false
	}
	r.backedUp = len(backups)
	for i, obs := range byShard {
		again := len(obs) > 1 && !backups[i]
		if again {
			r.completedTwice++
		}
		redelivered := false
		for _, o := range obs {
			if o.Attempt > 1 {
				redelivered = true
			}
		}
		if redelivered {
			r.redelivered++
		}
		if again || redelivered {
			r.redone++
		}
		if again && !fromVictim(obs[0]) {
			r.completedRerun++
		}
	}
	for _, n := range dispatches {
		r.redispatched += max(0, n-1)
	}
	return r
}

// timeline is what the plot draws of one run.
type timeline struct {
	title     string
	start     time.Time
	total     int
	samples   []sample
	completed []time.Time // first result of each shard, in order
	kills     []Kill
	elections []Elect
	finished  float64 // seconds since start the job ended (0: not ended)
}

func firstCompletions(results []resultObs) []time.Time {
	seen := map[int]bool{}
	var out []time.Time
	for _, o := range results {
		if !seen[o.Index] {
			seen[o.Index] = true
			out = append(out, o.T)
		}
	}
	return out
}
