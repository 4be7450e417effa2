package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/RoaringBitmap/roaring/v2"
	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Plans. A job's shards are never all in the leader's memory after planning:
//
//   - an Indexed job (primes, pi, sleep) stores nothing but its shard count; shard i is made from
//     the parameters (already in the spec) when it is dispatched, by this leader or the next;
//   - any other job's Split output is stored in pages of protocol.PlanPageShards shards
//     (<job>/plan-<epoch>/<p>, each with its own checksum) and read back a page at a time as the
//     dispatch window drains.
//
// Either way a dispatcher holds one page (or nothing) besides its window, whatever the job's size.

// planner is the component that splits jobs: it validates and plans a job, stores a split job's
// pages, and gives a planned job's shards back (planSource).
type planner struct {
	fence *fence.Fence // its epoch names the plan's pages
	cfg   Config
	env   jobs.Env
	store Store
	log   *slog.Logger
}

var _ planHost = (*planner)(nil)

// plan validates a job and plans it: it makes its empty aggregate, and counts its shards (an
// indexed job) or splits it and stores the pages (any other). Every call of the job's code is
// isolated. The job returned has its plan (cp.Total, cp.Plan) and no checkpoint yet. Errors are
// the job's (a refusal), or match errPlanStorage.
func (pl *planner) plan(ctx context.Context, id string, spec *protocol.Spec, impl jobs.Job) (*job, error) {
	defer telemetry.Start(ctx, id, "plan").End()
	j := &job{id: id, spec: spec, impl: impl, done: roaring.New(), progress: make(chan struct{}, 1)}
	if err := j.call("validate", func() error { return impl.Validate(spec.Params) }); err != nil {
		return nil, err
	}
	run, kind, err := newRunner(spec, impl) // runner.go
	if err != nil {
		return nil, err
	}
	if err := run.plan(ctx, pl, j); err != nil {
		return nil, err
	}
	j.run, j.cp.Kind = run, kind
	return j, nil
}

// planShards stores a split job's shards as pages, in parallel. Each page is dropped from shards
// once it is encoded, so the split's memory is given back as it is written.
func (pl *planner) planShards(ctx context.Context, id string, shards [][]byte) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for p := range protocol.PlanPageCount(len(shards)) {
		first := p * protocol.PlanPageShards
		page := shards[first:min(first+protocol.PlanPageShards, len(shards))]
		data := protocol.EncodePlanPage(first, page)
		clear(page)
		g.Go(func() error {
			if _, err := pl.store.Put(gctx, protocol.PlanPageBlob(id, pl.fence.Epoch, p), data, store.Cond{}); err != nil {
				return fmt.Errorf("write plan page %d: %w", p, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// planSource gives a job's shards by index, for one goroutine (a dispatcher, a backup run): made
// from the parameters, or read from the stored plan a page at a time (the last page read is kept).
type planSource struct {
	st    Store
	id    string
	typ   string
	kind  protocol.Kind // every message of the job carries it
	epoch uint64
	total int
	plan  jobs.Plan // an indexed plan; nil for a stored one

	page   int // the page held in shards, -1 for none
	shards [][]byte
}

// source returns a new planSource for j. For an indexed job it decodes the parameters again
// (cheap), so that sources never share a jobs.Plan.
func (pl *planner) source(j *job) (*planSource, error) {
	s := &planSource{st: pl.store, id: j.id, typ: j.spec.Type, kind: j.cp.Kind, epoch: j.cp.PlanEpoch, total: j.cp.Total, page: -1}
	switch j.cp.Plan {
	case protocol.PlanIndexed:
		ix, ok := j.impl.(jobs.Indexed)
		if !ok {
			return nil, fmt.Errorf("job %s was planned by index, but type %q on this leader has no Plan method: run one build across the cluster", j.id, j.spec.Type)
		}
		var plan jobs.Plan
		n := 0
		err := core.Isolate(j.spec.Type, "plan", func() (err error) {
			if plan, err = ix.Plan(j.spec.Params); err == nil {
				n = plan.Len()
			}
			return err
		})
		if err != nil {
			return nil, core.WrapOp("plan", err)
		}
		if n != j.cp.Total {
			return nil, fmt.Errorf("%w: plan has %d shards, checkpoint %d", jobs.ErrBadCheckpoint, n, j.cp.Total)
		}
		s.plan = plan
	case protocol.PlanPages:
	default:
		return nil, fmt.Errorf("%w: job %s has no plan form (a checkpoint of an older build?)", jobs.ErrBadCheckpoint, j.id)
	}
	return s, nil
}

// shard returns shard i. Errors matching jobs.ErrBadCheckpoint (a corrupt page, a plan that
// changed) and *UserCodeError (the job's Shard panicked) are permanent; others (storage
// unavailable) may pass on retry.
func (s *planSource) shard(ctx context.Context, i int) ([]byte, error) {
	if i < 0 || i >= s.total {
		return nil, fmt.Errorf("%w: shard %d of a plan of %d", jobs.ErrBadCheckpoint, i, s.total)
	}
	if s.plan != nil {
		var b []byte
		err := core.Isolate(s.typ, "shard", func() (err error) {
			b, err = s.plan.Shard(i)
			return err
		})
		if _, ok := err.(*UserCodeError); ok {
			return nil, err // permanent too: the job's code fails it
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", jobs.ErrBadCheckpoint, err)
		}
		if len(b) > jobs.MaxShardBytes {
			return nil, fmt.Errorf("%w: shard %d is %d bytes; the limit is %d", jobs.ErrBadCheckpoint, i, len(b), jobs.MaxShardBytes)
		}
		return b, nil
	}
	p := i / protocol.PlanPageShards
	if p != s.page {
		data, _, err := s.st.Get(ctx, protocol.PlanPageBlob(s.id, s.epoch, p))
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: plan page %d of job %s is missing", jobs.ErrBadCheckpoint, p, s.id)
		}
		if err != nil {
			return nil, fmt.Errorf("read plan page %d: %w", p, err)
		}
		first, shards, err := protocol.DecodePlanPage(data)
		if err == nil {
			err = protocol.CheckPlanPage(p, s.total, first, shards)
		}
		if err != nil {
			return nil, fmt.Errorf("plan page %d of job %s: %w", p, s.id, err)
		}
		s.page, s.shards = p, shards
	}
	return s.shards[i-p*protocol.PlanPageShards], nil
}

// shardRange returns shards [from, to).
func (s *planSource) shardRange(ctx context.Context, from, to int) ([][]byte, error) {
	out := make([][]byte, 0, to-from)
	for i := from; i < to; i++ {
		b, err := s.shard(ctx, i)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// newRunner returns the runner of a job of spec to be planned: keyed when the job's code says
// so for its parameters.
func newRunner(spec *protocol.Spec, impl jobs.Job) (runner, protocol.Kind, error) {
	kj, err := runsKeyed(spec, impl)
	switch {
	case err != nil:
		return nil, 0, err
	case kj != nil:
		return &keyedRun{kj: kj}, protocol.KindKeyed, nil
	case spec.OutputFormat != "":
		return nil, 0, fmt.Errorf("%w: output_format %q: a %s job with these parameters is an aggregate job, whose result is a value with no output blobs; leave output_format out",
			jobs.ErrBadParams, spec.OutputFormat, spec.Type)
	}
	run, err := newAggregateRun(spec, impl)
	return run, protocol.KindAggregate, err
}

// planEnv is the cluster's side of planning a job of type typ: its Env knows the slots of the
// workers that run typ (jobs.SlotsEnv) when the config says.
func (pl *planner) planEnv(typ string) planEnv {
	env := pl.env
	if pl.cfg.Slots != nil {
		env = jobs.EnvWithSlots(env, pl.cfg.Slots(typ))
	}
	return planEnv{env: env, partitions: pl.cfg.Partitions, container: pl.containerName(), log: pl.log}
}

func (t *planner) containerName() string {
	if n, ok := t.store.(interface{ Name() string }); ok {
		return n.Name()
	}
	return ""
}
