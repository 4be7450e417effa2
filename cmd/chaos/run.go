package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/queue"
	"github.com/mapagg/mapagg/store"
)

// runner owns what a run starts (the rig, which knows every pid it ever started).
type runner struct {
	cfg Config
	rig *rig.Rig
	out io.Writer
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
	r := &runner{cfg: cfg, out: out}
	rep := &Report{Header: rig.NewHeader(cfg.Quick), Settings: settingsOf(cfg)}
	defer rep.End()
	var err error
	if r.rig, err = rig.New(ctx, rig.Options{Dir: cfg.Dir, WorkerBin: cfg.WorkerBin, NATSBin: cfg.NATSBin, Logf: r.logf}); err != nil {
		return nil, err
	}
	defer r.rig.Close()
	faults := selectFaults(cfg.Faults)

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
	r.rig.Close()
	rep.LeftRunning = r.rig.LeftRunning()
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
	defer r.rig.Stop(e.c)
	o, err := rig.Reference(ctx, e.c, j, r.cfg.Deadline+time.Duration(j.Shards)*r.cfg.ShardDelay, nil)
	if err != nil {
		return 0, err
	}
	r.logf("reference %s: %.2f s", j, o.Makespan.Seconds())
	return rig.Round3(o.Makespan.Seconds()), nil
}

// env is one fault's cluster and the clients the run inspects it with.
type env struct {
	r    *runner
	name string
	c    *cluster.Cluster
	q    *queue.Queue
	js   jetstream.JetStream
	jobs *store.Container
}

// startEnv starts a cluster with servers of its own for name; mapDelay slows every map step
// (see Config.mapDelay).
func (r *runner) startEnv(ctx context.Context, name string, mapDelay time.Duration) (*env, error) {
	start := time.Now()
	c, err := r.rig.Start(ctx, rig.Spec{Name: name, Workers: r.cfg.Workers, LeaseDuration: r.cfg.LeaseDuration,
		ShardTimeout: r.cfg.ShardTimeout, Concurrency: 2, MapDelay: mapDelay})
	if err != nil {
		return nil, err
	}
	e := &env{r: r, name: name, c: c, jobs: store.New(c.Blob(), c.JobsContainer())}
	if e.q, err = queue.New(c.ConnStr, c.QueueName()); err != nil {
		r.rig.Stop(c)
		return nil, err
	}
	if e.js, err = jetstream.New(c.Bus.Conn()); err != nil {
		r.rig.Stop(c)
		return nil, err
	}
	r.logf("%s: cluster up in %v (logs in %s)", name, time.Since(start).Round(time.Millisecond), c.Options().Dir)
	return e, nil
}

func (e *env) submit(ctx context.Context, j knownjobs.Job) (string, time.Time, error) {
	return rig.Submit(ctx, e.c, j)
}

// status reads a job's status, nil while it cannot be read (storage down, not yet written).
func (e *env) status(ctx context.Context, id string) *client.Status { return rig.Status(ctx, e.c, id) }

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
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
