package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/queue"
	"github.com/mapagg/mapagg/store"
)

// runner owns what a run starts. Every process it ever started is remembered by pid, so the run
// can prove at the end that none is left.
type runner struct {
	cfg     Config
	bin     string
	testBin string // the test worker, for the bad-job faults (badjob.go)
	natsBin string
	out     io.Writer

	mu   sync.Mutex
	pids map[int]string // every process started, by pid → what it was
}

func (r *runner) logf(format string, args ...any) {
	fmt.Fprintf(r.out, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
}

// Run runs the reference jobs and every fault of cfg, and returns the report. It stops everything
// it started before it returns, whatever happens (ctx ending included).
func Run(ctx context.Context, cfg Config, out io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &runner{cfg: cfg, out: out, pids: map[int]string{}}
	rep := &Report{Version: 1, StartedAt: time.Now().UTC(), Quick: cfg.Quick,
		Machine:  Machine{CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version()},
		Settings: settingsOf(cfg)}
	defer func() { rep.DurationS = round3(time.Since(rep.StartedAt).Seconds()) }()
	var err error
	if r.natsBin = cfg.NATSBin; r.natsBin == "" {
		if r.natsBin, err = devserver.NATSBin(); err != nil {
			return nil, err
		}
	}
	if r.bin = cfg.WorkerBin; r.bin == "" {
		start := time.Now()
		if r.bin, err = cluster.Build(cfg.Dir, false); err != nil {
			return nil, err
		}
		r.logf("built the worker in %v", time.Since(start).Round(time.Millisecond))
	}
	faults := selectFaults(cfg.Faults)
	if err := r.buildTestWorker(faults); err != nil {
		return nil, err
	}

	// The reference: each job the faults use, once, without a fault.
	refs := map[string]float64{}
	for _, j := range referenceJobs(cfg, faults) {
		if ctx.Err() != nil {
			break
		}
		ms, err := r.reference(ctx, j)
		if err != nil {
			rep.Incomplete = fmt.Sprintf("reference run of %s: %v", j, err)
			return rep, errors.New(rep.Incomplete)
		}
		refs[j.String()] = ms
		rep.References = append(rep.References, Reference{Job: j.String(), MakespanS: ms})
	}
	for _, f := range faults {
		if ctx.Err() != nil {
			rep.Incomplete = "interrupted"
			break
		}
		res := r.runFault(ctx, f, refs)
		r.logf("%s: %s %s", f.name, res.Verdict, res.Problem)
		rep.Results = append(rep.Results, res)
	}
	if lb := r.survivors(); len(lb) > 0 {
		rep.LeftRunning = lb
	}
	rep.tally()
	return rep, ctx.Err()
}

// referenceJobs lists the distinct jobs the faults run.
func referenceJobs(cfg Config, faults []fault) []knownjobs.Job {
	seen := map[string]bool{}
	var out []knownjobs.Job
	for _, f := range faults {
		if f.expectCancel {
			continue
		}
		j := f.job(cfg)
		if !seen[j.String()] {
			seen[j.String()] = true
			out = append(out, j)
		}
	}
	return out
}

// reference runs j once on a fresh cluster and returns its makespan in seconds.
func (r *runner) reference(ctx context.Context, j knownjobs.Job) (float64, error) {
	e, err := r.startEnv(ctx, fmt.Sprintf("reference-%s-%d", j.Type, j.Shards), r.cfg.mapDelay(j))
	if err != nil {
		return 0, err
	}
	defer r.stopEnv(e)
	id, start, err := e.submit(ctx, j)
	if err != nil {
		return 0, err
	}
	st, ended := e.waitEnd(ctx, id, time.Now().Add(r.cfg.Deadline+time.Duration(j.Shards)*r.cfg.ShardDelay))
	if !ended {
		return 0, fmt.Errorf("job %s did not end without a fault (%s)", id, describe(st))
	}
	if st.State != jobs.StateSucceeded || j.Check(st.Result) != nil || st.FinishedAt == nil {
		return 0, fmt.Errorf("job %s wrong without a fault: %s %s %v", id, st.State, st.Error, j.Check(st.Result))
	}
	ms := st.FinishedAt.Sub(start).Seconds()
	r.logf("reference %s: %.2f s", j, ms)
	return round3(ms), nil
}

// env is one fault's cluster and the clients the run inspects it with.
type env struct {
	r    *runner
	name string
	c    *cluster.Cluster
	q    *queue.Queue
	js   jetstream.JetStream
	jobs *store.Container
	pids map[int]string // every process this cluster ran, by pid
}

// startEnv starts a cluster of its own for name; mapDelay slows every map step (see
// Config.mapDelay).
func (r *runner) startEnv(ctx context.Context, name string, mapDelay time.Duration) (*env, error) {
	dir := filepath.Join(r.cfg.Dir, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	start := time.Now()
	c, err := cluster.Start(sctx, cluster.Options{Dir: dir, WorkerBin: r.workerBin(name), NATSBin: r.natsBin, Workers: r.cfg.Workers,
		LeaseDuration: r.cfg.LeaseDuration, ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2, MapDelay: mapDelay})
	if err != nil {
		return nil, fmt.Errorf("start cluster %s: %w", name, err)
	}
	e := &env{r: r, name: name, c: c, jobs: store.New(c.Blob(), c.JobsContainer()), pids: map[int]string{}}
	e.track()
	if e.q, err = queue.New(c.ConnStr, "jobs"); err != nil {
		r.stopEnv(e)
		return nil, err
	}
	if e.js, err = jetstream.New(c.Bus.Conn()); err != nil {
		r.stopEnv(e)
		return nil, err
	}
	r.logf("%s: cluster up in %v (logs in %s)", name, time.Since(start).Round(time.Millisecond), dir)
	return e, nil
}

// track remembers the pids of every process the cluster runs now.
func (e *env) track() {
	e.r.mu.Lock()
	defer e.r.mu.Unlock()
	add := func(pid int, what string) {
		e.pids[pid] = what
		e.r.pids[pid] = what
	}
	if az := e.c.Azurite(); az != nil {
		for _, s := range []devserver.Service{devserver.Blob, devserver.Queue} {
			if pid := az.PID(s); pid != 0 {
				add(pid, s.String())
			}
		}
	}
	if np := e.c.NATSProcess(); np != nil && np.PID() != 0 {
		add(np.PID(), "nats-server")
	}
	for _, id := range e.c.Running() {
		if p := e.c.Proc(id); p != nil {
			add(p.PID, "worker "+id)
		}
	}
}

func (r *runner) stopEnv(e *env) {
	e.track()
	e.c.Stop()
}

// survivors lists the processes the run started that still exist.
func (r *runner) survivors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return alive(r.pids)
}

// survivors lists the processes this cluster ran that still exist.
func (e *env) survivors() []string {
	e.r.mu.Lock()
	defer e.r.mu.Unlock()
	return alive(e.pids)
}

func alive(pids map[int]string) []string {
	var out []string
	for pid, what := range pids {
		if syscall.Kill(pid, 0) == nil {
			out = append(out, fmt.Sprintf("%s (pid %d) still running", what, pid))
		}
	}
	sort.Strings(out)
	return out
}

func (e *env) submit(ctx context.Context, j knownjobs.Job) (string, time.Time, error) {
	start := time.Now()
	id, err := e.c.Client.Submit(ctx, j.Type, j.Params)
	if err != nil {
		return "", start, fmt.Errorf("submit %s: %w", j, err)
	}
	return id, start, nil
}

// status reads a job's status, nil while it cannot be read (storage down, not yet written).
func (e *env) status(ctx context.Context, id string) *client.Status {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := e.c.Client.Status(sctx, id)
	if err != nil {
		return nil
	}
	return st
}

// waitProgress waits until at least frac of id's shards are merged (or it ended); false when
// limit passed first.
func (e *env) waitProgress(ctx context.Context, id string, frac float64, limit time.Duration) (*client.Status, bool) {
	until := time.Now().Add(limit)
	for {
		st := e.status(ctx, id)
		if st != nil && (st.State.Terminal() || st.ShardsTotal > 0 && float64(st.ShardsDone) >= frac*float64(st.ShardsTotal)) {
			return st, true
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return st, false
		}
		sleep(ctx, 50*time.Millisecond)
	}
}

// waitEnd polls id until it ends; false (with the last status read) when deadline passed first.
func (e *env) waitEnd(ctx context.Context, id string, deadline time.Time) (*client.Status, bool) {
	var last *client.Status
	for {
		if st := e.status(ctx, id); st != nil {
			last = st
			if st.State.Terminal() && st.State != jobs.StateSucceeded {
				return st, true
			}
			if st.State == jobs.StateSucceeded { // status is metadata only: read the result
				if res, err := e.c.Client.Result(ctx, id); err == nil {
					st.Result = res
					return st, true
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return last, false
		}
		sleep(ctx, 250*time.Millisecond)
	}
}

func describe(st *client.Status) string {
	if st == nil {
		return "status unreadable"
	}
	s := fmt.Sprintf("%s, %d of %d shards merged", st.State, st.ShardsDone, st.ShardsTotal)
	if st.Error != "" {
		s += ": " + clip(st.Error, 300)
	}
	return s
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// clip cuts s to n bytes, saying how long it was.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}

// leftovers lists what a finished job left behind: its active marker, its messages on the shards
// and results streams, and any message on the job queue. It waits up to 15 s for each to go (the
// leader cleans up after the final checkpoint).
func (e *env) leftovers(ctx context.Context, ids []string) []string {
	until := time.Now().Add(15 * time.Second)
	names := e.c.Names()
	for {
		var out []string
		for _, id := range ids {
			if ok, err := e.jobs.Exists(ctx, protocol.ActiveBlob(id)); err != nil {
				out = append(out, fmt.Sprintf("active marker of %s unreadable: %v", id, err))
			} else if ok {
				out = append(out, "active marker "+protocol.ActiveBlob(id))
			}
			for _, s := range []struct{ stream, subject string }{
				{names.ShardStream(), names.ShardSubject(id)}, {names.ResultStream(), names.ResultSubject(id)},
			} {
				if n, err := e.streamCount(ctx, s.stream, s.subject); err != nil {
					out = append(out, fmt.Sprintf("%s unreadable: %v", s.stream, err))
				} else if n > 0 {
					out = append(out, fmt.Sprintf("%d messages on %s (%s)", n, s.stream, s.subject))
				}
			}
		}
		if n, err := e.q.Depth(ctx); err != nil {
			out = append(out, fmt.Sprintf("job queue unreadable: %v", err))
		} else if n > 0 {
			out = append(out, fmt.Sprintf("%d messages on the job queue", n))
		}
		if len(out) == 0 || time.Now().After(until) || ctx.Err() != nil {
			return out
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// streamCount counts the messages of stream on subject.
func (e *env) streamCount(ctx context.Context, stream, subject string) (uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := e.js.Stream(sctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(sctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// deadLetters counts the dead letters from source ("results", "shards", "queue"), waiting up to
// 15 s for want of them (the leader reads the queue every few seconds).
func (e *env) deadLetters(ctx context.Context, source string, want uint64) uint64 {
	until := time.Now().Add(15 * time.Second)
	for {
		n, _ := e.streamCount(ctx, e.c.Names().DeadStream(), e.c.Names().DeadSubject(source))
		if n >= want || time.Now().After(until) || ctx.Err() != nil {
			return n
		}
		sleep(ctx, 500*time.Millisecond)
	}
}
