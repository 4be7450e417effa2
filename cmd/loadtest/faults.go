package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// piJob is a CPU-bound pi job whose exact answer is learned from its first run (the same
// parameters always give the same points): check is set by the caller once it knows it.
func piJob(samples int64, shards int) jobSpec {
	p, _ := json.Marshal(builtin.PiParams{Samples: samples, Shards: shards, Seed: 42})
	return jobSpec{typ: "pi", params: p, shards: shards}
}

// loaded is issue 11's no-fault run under load: CPU-bound jobs back to back on a cluster at
// default settings for LoadedDuration, with nothing killed. Every new term, every lease break is
// a takeover of a live leader.
func (r *runner) loaded(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.env.startCluster(ctx, clusterSpec{name: "load", leaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.env.stopCluster(c)
	ld := &Loaded{}
	r.mu.Lock()
	r.rep.Loaded = ld
	r.mu.Unlock()
	// About 10 s of CPU per job on two cores (a tenth of it in short runs, so the last job does
	// not outlast the run by much).
	samples := int64(2_000_000_000)
	if cfg.LoadedDuration < time.Minute {
		samples /= 10
	}
	job := piJob(samples, 400)
	var want *builtin.PiResult
	job.check = func(res json.RawMessage) error {
		var got builtin.PiResult
		if err := json.Unmarshal(res, &got); err != nil {
			return fmt.Errorf("pi result %s: %v", res, err)
		}
		if got.Samples != uint64(samples) {
			return fmt.Errorf("pi result %s: want %d samples", res, samples)
		}
		if want == nil {
			want = &got
		} else if got != *want {
			return fmt.Errorf("pi result %s: the first run of the same job gave %+v", res, *want)
		}
		return nil
	}
	start := time.Now()
	lw := watchLease(ctx, c)
	cpu0 := clusterCPU(c)
	r.log.Phase(fmt.Sprintf("loaded no-fault run (%v)", cfg.LoadedDuration), int(cfg.LoadedDuration.Seconds()))
	// Three jobs in flight at once, so one's planning and finishing never leaves the cores idle.
	const inFlight = 3
	type res struct {
		o   outcome
		err error
	}
	results := make(chan res, inFlight)
	inflight := 0
	launch := func() {
		inflight++
		go func() {
			id, st, err := submit(ctx, c, job)
			if err != nil {
				results <- res{err: err}
				return
			}
			o, err := await(ctx, c, job, id, st, cfg.JobTimeout, nil)
			results <- res{o, err}
		}()
	}
	var firstErr error
	for {
		for inflight < inFlight && time.Since(start) < cfg.LoadedDuration && firstErr == nil {
			launch()
		}
		if inflight == 0 {
			break
		}
		x := <-results
		inflight--
		r.log.Set(int(time.Since(start).Seconds()))
		if x.err != nil {
			if firstErr == nil {
				firstErr = x.err
				r.log.Logf("loaded run: %v", x.err)
			}
			continue
		}
		r.account(x.o)
		ld.Jobs++
		if x.o.exact {
			ld.Exact++
		}
	}
	r.log.Done()
	end := time.Now()
	cpu := clusterCPU(c) - cpu0
	terms := lw.stop()
	ld.DurationS = round3(end.Sub(start).Seconds())
	ld.CPUBusy = round3(cpu.Seconds() / (float64(runtime.NumCPU()) * end.Sub(start).Seconds()))
	time.Sleep(200 * time.Millisecond) // the last events on their way
	ld.Elections = changes(c, terms, start, end)
	ld.BrokeLeases = countEvents(c, string(election.EventBrokeLease), start, end, 0)
	ld.Suspected = countEvents(c, string(election.EventSuspected), start, end, 0)
	r.log.Logf("loaded run: %.0fs, %d pi jobs (%d exact), CPU busy %.0f%%: %d leader changes, %d lease breaks, %d suspicions",
		ld.DurationS, ld.Jobs, ld.Exact, 100*ld.CPUBusy, ld.Elections, ld.BrokeLeases, ld.Suspected)
	return firstErr
}

// outage is issue 11's NATS-outage run: a cluster on a NATS server of its own (a child process),
// SIGKILLed mid-job for OutageDuration and started again on the same port and store. The job
// must finish exact, and the cluster may change leader at most once.
func (r *runner) outage(ctx context.Context) error {
	cfg := r.cfg
	np, err := startNATSProc(filepath.Join(r.env.dir, "nats-outage"))
	if err != nil {
		return err
	}
	defer np.kill()
	r.log.Logf("nats-outage: NATS server process on %s", np.url())
	c, err := r.env.startCluster(ctx, clusterSpec{name: "outage", leaseDuration: cfg.LeaseDuration, natsURL: np.url(), mapDelay: cfg.MapDelay})
	if err != nil {
		return err
	}
	defer r.env.stopCluster(c)
	// The failover job (long enough to kill mid-way, by its map delay).
	job := sleepJob(cfg.FailoverShards, "")
	out := &Outage{}
	r.mu.Lock()
	r.rep.Outage = out
	r.mu.Unlock()
	s, err := r.strike(ctx, c, "nats-outage", job, cfg.OutageDuration)
	if err != nil {
		return err
	}
	defer s.close(r)
	if s.ref.exact {
		out.ReferenceS = round3(s.ref.makespan.Seconds())
	}
	id, start, smp, lw, jctx, at := s.id, s.start, s.smp, s.lw, s.jctx, s.at
	out.Job = id
	var marks []Kill
	if s.reached {
		killed := time.Now()
		marks = append(marks, Kill{AtS: round3(killed.Sub(start).Seconds()), Worker: "nats-server", Signal: "SIGKILL", Done: at.Done, at: killed})
		np.kill()
		r.log.Logf("nats-outage: killed the NATS server with %d of %d results on the wire (%d merged); down for %v", s.seen, job.shards, at.Done, cfg.OutageDuration)
		if err := waitCtx(ctx, cfg.OutageDuration); err != nil {
			return err
		}
		if err := np.start(); err != nil {
			return fmt.Errorf("restart nats: %w", err)
		}
		out.DownS = round3(time.Since(killed).Seconds())
		marks = append(marks, Kill{AtS: round3(time.Since(start).Seconds()), Worker: "nats-server", Signal: "restart"})
		r.log.Logf("nats-outage: NATS server back after %.1fs", out.DownS)
	}
	o, err := r.awaitEnd(ctx, jctx, c, job, smp, "nats-outage", id, start)
	if err != nil {
		return err
	}
	end := time.Now()
	terms := lw.stop()
	out.Exact = o.exact
	if o.makespan > 0 {
		out.MakespanS = round3(o.makespan.Seconds())
		if out.ReferenceS > 0 {
			out.TimeLostS = round3(out.MakespanS - out.ReferenceS - out.DownS)
		}
	}
	time.Sleep(500 * time.Millisecond) // events buffered during the outage arrive
	out.LeaderChanges = changes(c, terms, start, end)
	out.timeline = faultTimeline(c, fmt.Sprintf("NATS outage (%.0f s, %s)", out.DownS, job.typ), start, end, job.shards, smp.close(), marks, out.MakespanS)
	out.BrokeLeases = countEvents(c, string(election.EventBrokeLease), start, end, 0)
	r.log.Logf("nats-outage: exact %v, makespan %.2fs (reference %.2fs, down %.1fs): %d leader changes, %d lease breaks",
		out.Exact, out.MakespanS, out.ReferenceS, out.DownS, out.LeaderChanges, out.BrokeLeases)
	return nil
}

// natsCluster3 is three in-process NATS servers clustered on 127.0.0.1, each with its own store,
// restartable one at a time.
type natsCluster3 struct {
	mu    sync.Mutex
	opts  []*server.Options
	nodes []*server.Server
}

func startNATSCluster(dir string, n int) (*natsCluster3, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	nc := &natsCluster3{nodes: make([]*server.Server, n)}
	for i := range n {
		nc.opts = append(nc.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: ports[i],
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i)),
			JetStreamMaxMemory: 256 << 20, JetStreamMaxStore: 4 << 30, MaxPayload: 8 << 20,
			NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "loadtest", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		})
	}
	for i := range n {
		if err := nc.start(i); err != nil {
			nc.close()
			return nil, err
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for !nc.hasMetaLeader() {
		if time.Now().After(deadline) {
			nc.close()
			return nil, fmt.Errorf("nats cluster: no JetStream meta leader within 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nc, nil
}

func (nc *natsCluster3) hasMetaLeader() bool {
	nc.mu.Lock()
	defer nc.mu.Unlock()
	for _, s := range nc.nodes {
		if s != nil && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

func (nc *natsCluster3) start(i int) error {
	o := *nc.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("nats node %d: %w", i, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("nats node %d not ready within 20s", i)
	}
	nc.mu.Lock()
	nc.nodes[i] = s
	nc.mu.Unlock()
	return nil
}

func (nc *natsCluster3) stop(i int) {
	nc.mu.Lock()
	s := nc.nodes[i]
	nc.nodes[i] = nil
	nc.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

func (nc *natsCluster3) close() {
	for i := range nc.nodes {
		nc.stop(i)
	}
}

func (nc *natsCluster3) url(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", nc.opts[i].Port) }

func (nc *natsCluster3) urls() string {
	var us []string
	for i := range nc.opts {
		us = append(us, nc.url(i))
	}
	return strings.Join(us, ",")
}

// natsClusterRun is issue 13's scenario: a 3-node NATS cluster, R3 streams, worker wN connected
// to node N−1; the node of the leader is stopped mid-job for NodeDownDuration and restarted.
// The job must finish exact; the time lost against the same job without the fault is reported.
func (r *runner) natsClusterRun(ctx context.Context) error {
	cfg := r.cfg
	nc, err := startNATSCluster(filepath.Join(r.env.dir, "nats-cluster"), 3)
	if err != nil {
		return err
	}
	defer nc.close()
	r.log.Logf("nats-cluster: 3 nodes on %s", nc.urls())
	we := map[string][]string{}
	for i := 1; i <= cfg.Workers; i++ {
		we[fmt.Sprintf("w%d", i)] = []string{"NATS_URL=" + nc.url((i-1)%3)}
	}
	c, err := r.env.startCluster(ctx, clusterSpec{name: "n3", leaseDuration: cfg.LeaseDuration, natsURL: nc.urls(),
		mapDelay: cfg.MapDelay, env: []string{"STREAM_REPLICAS=3"}, workerEnv: we})
	if err != nil {
		return err
	}
	defer r.env.stopCluster(c)
	job := sleepJob(cfg.FailoverShards, "")
	res := &NATSCluster{Nodes: 3, Replicas: 3, KilledNode: -1}
	r.mu.Lock()
	r.rep.NATSCluster = res
	r.mu.Unlock()
	s, err := r.strike(ctx, c, "nats-cluster", job, cfg.NodeDownDuration)
	if err != nil {
		return err
	}
	defer s.close(r)
	if s.ref.exact {
		res.ReferenceS = round3(s.ref.makespan.Seconds())
	}
	id, start, smp, lw, jctx, at := s.id, s.start, s.smp, s.lw, s.jctx, s.at
	res.Job = id
	var marks []Kill
	if s.reached {
		node := 0
		if l, err := c.Leader(jctx); err == nil && l != nil {
			var w int
			if _, err := fmt.Sscanf(l.ID, "w%d", &w); err == nil && w >= 1 {
				node = (w - 1) % 3
			}
		}
		res.KilledNode = node
		killed := time.Now()
		marks = append(marks, Kill{AtS: round3(killed.Sub(start).Seconds()), Worker: fmt.Sprintf("nats n%d", node), Signal: "stop", Done: at.Done, at: killed})
		nc.stop(node)
		r.log.Logf("nats-cluster: stopped node n%d (the leader's) with %d of %d results on the wire (%d merged); down for %v", node, s.seen, job.shards, at.Done, cfg.NodeDownDuration)
		if err := waitCtx(ctx, cfg.NodeDownDuration); err != nil {
			return err
		}
		if err := nc.start(node); err != nil {
			return err
		}
		res.DownS = round3(time.Since(killed).Seconds())
		marks = append(marks, Kill{AtS: round3(time.Since(start).Seconds()), Worker: fmt.Sprintf("nats n%d", node), Signal: "restart"})
	}
	o, err := r.awaitEnd(ctx, jctx, c, job, smp, "nats-cluster", id, start)
	if err != nil {
		return err
	}
	end := time.Now()
	terms := lw.stop()
	res.Exact = o.exact
	if o.makespan > 0 {
		res.MakespanS = round3(o.makespan.Seconds())
		if res.ReferenceS > 0 {
			res.TimeLostS = round3(res.MakespanS - res.ReferenceS)
		}
	}
	time.Sleep(300 * time.Millisecond)
	res.LeaderChanges = changes(c, terms, start, end)
	res.timeline = faultTimeline(c, fmt.Sprintf("3-node NATS cluster, node n%d down %.0f s", res.KilledNode, res.DownS), start, end, job.shards, smp.close(), marks, res.MakespanS)
	r.log.Logf("nats-cluster: exact %v, makespan %.2fs against %.2fs without the fault: %.2fs lost; %d leader changes",
		res.Exact, res.MakespanS, res.ReferenceS, res.TimeLostS, res.LeaderChanges)
	return nil
}

// struck is a job submitted to be hit by a fault outside the workers, at the moment to strike.
type struck struct {
	ref     outcome   // the same job without the fault, after a warm-up
	id      string    // the faulted job
	start   time.Time // just before its submit
	lw      *leaseWatch
	smp     *sampler
	jctx    context.Context // the faulted job's deadline: the job timeout plus extra
	at      sample          // its last checkpoint sample when 30 % of its results were on the wire
	seen    int64           // results on the wire then
	reached bool            // false: it ended or its deadline passed first
	cancel  context.CancelFunc
}

// strike runs a warm-up job (it creates the consumers, so the reference measures what the
// faulted job does) and the reference run of job on c, then submits job again and waits until 30 % of its results are on the wire (checkpoint samples may
// come too late), it ends, or the job timeout plus extra passes. The caller judges the job with
// awaitEnd, stops lw, and calls close.
func (r *runner) strike(ctx context.Context, c *cluster.Cluster, name string, job jobSpec, extra time.Duration) (*struck, error) {
	if _, err := r.runJob(ctx, c, sleepJob(20, ""), name+": warm-up", 20); err != nil {
		return nil, err
	}
	ref, err := r.runJob(ctx, c, job, name+": reference", job.shards)
	if err != nil {
		return nil, err
	}
	r.log.Phase(name+": job with the fault", job.shards)
	s := &struck{ref: ref, lw: watchLease(ctx, c)}
	if s.id, s.start, err = submit(ctx, c, job); err != nil {
		s.lw.stop()
		r.log.Done()
		return nil, err
	}
	s.smp = startSampler(ctx, c, s.id, 100*time.Millisecond)
	s.jctx, s.cancel = context.WithTimeout(ctx, r.cfg.JobTimeout+extra)
	rw, err := watchResults(c, 3*job.shards/10)
	if err != nil {
		s.close(r)
		s.lw.stop()
		return nil, err
	}
	select {
	case <-rw.reached:
	case <-s.smp.done:
	case <-s.jctx.Done():
	}
	rw.stop()
	if ctx.Err() != nil {
		s.close(r)
		s.lw.stop()
		return nil, ctx.Err()
	}
	s.at, _, _ = s.smp.last()
	s.seen = rw.seen.Load()
	s.reached = s.jctx.Err() == nil && !s.at.State.Terminal()
	return s, nil
}

func (s *struck) close(r *runner) {
	s.smp.close()
	s.cancel()
	r.log.Done()
}

// faultTimeline is the plot of a run with faults outside the workers (marks) and the elections
// of c between start and end.
func faultTimeline(c *cluster.Cluster, title string, start, end time.Time, total int, samples []sample, marks []Kill, finished float64) *timeline {
	tl := &timeline{title: title, start: start, total: total, samples: samples, kills: marks, finished: finished}
	for _, e := range c.Events() {
		if e.Kind == cluster.Elected && e.Time.After(start) && e.Time.Before(end) {
			tl.elections = append(tl.elections, Elect{AtS: round3(e.Time.Sub(start).Seconds()), Worker: e.Worker, Epoch: e.Epoch})
		}
	}
	return tl
}
