package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// runner runs one job the way its kind asks (protocol.Kind): aggregateRun merges partials,
// keyedRun commits map and reduce tasks (keyed.go). The term's loop calls it; merge and
// checkpoint code see nothing else of the kind.
type runner interface {
	// plan splits j and stores its plan: j.cp.Total and j.cp.Plan.
	plan(ctx context.Context, p planHost, j *job) error
	// accept takes the result of shard r.Index (not yet done) and its partial. mergeDone: the
	// shard is done.
	accept(ctx context.Context, h runHost, j *job, r *protocol.ResultMsg, partial []byte) mergeOutcome
	// ready reports whether j, every shard done, may finish. If not, it starts what must come
	// first; the loop completes j later.
	ready(ctx context.Context, h runHost, j *job) bool
	// state is what j's next checkpoint stores of the runner; final: the checkpoint is
	// terminal and stores no aggregate.
	state(j *job, final bool) (runState, error)
	// result is the finished job's result.
	result(j *job) (json.RawMessage, error)
	// due reports whether j's next checkpoint is due at once.
	due() bool
	// adopted runs once the term holds j, resumed from its checkpoint.
	adopted(ctx context.Context, h runHost, j *job)
	// stored runs after checkpoint s of j is stored.
	stored(ctx context.Context, h runHost, j *job, s runState)
}

// runState is a runner's part of a checkpoint.
type runState struct {
	// encode returns the checkpoint's Aggregate. The writer calls it, off the loop.
	encode func() ([]byte, error)
	// phase, phaseDone, phaseTotal: a keyed job's phase and its progress (status shows them).
	phase                 string
	phaseDone, phaseTotal int
	// maps: how many map tasks of a keyed job the checkpoint commits.
	maps int
}

// runHost is what a runner asks of the term that runs its job.
type runHost interface {
	refuseResult(ctx context.Context, j *job, r *protocol.ResultMsg, reason string) mergeOutcome
	fail(j *job, err error)
	dispatchAgain(ctx context.Context, j *job, idx []uint32)
	writeManifest(ctx context.Context, j *job, kr *keyedRun)
	checkOutputs(ctx context.Context, j *job, kr *keyedRun)
}

// planHost is what planning asks of the planner: the job's environment and storing a split plan.
type planHost interface {
	planEnv(typ string) planEnv
	planShards(ctx context.Context, id string, shards [][]byte) error
}

// planEnv is the cluster's side of planning.
type planEnv struct {
	env        jobs.Env
	partitions int    // a keyed job's default partition count
	container  string // where a keyed job's outputs are stored
	log        *slog.Logger
}

var _ runner = (*aggregateRun)(nil)

// aggregateRun runs an aggregate job: each shard's partial is merged into the job's Aggregate.
type aggregateRun struct {
	agg jobs.Aggregate
}

func newAggregateRun(spec *protocol.Spec, impl jobs.Job) (*aggregateRun, error) {
	var agg jobs.Aggregate
	err := core.Isolate(spec.Type, "new aggregate", func() (err error) {
		agg, err = impl.NewAggregate(spec.Params)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("new aggregate: %w", err)
	}
	return &aggregateRun{agg: agg}, nil
}

// plan counts an indexed job's shards, or splits any other and stores the pages.
func (a *aggregateRun) plan(ctx context.Context, p planHost, j *job) error {
	spec, impl := j.spec, j.impl
	if ix, ok := impl.(jobs.Indexed); ok {
		var total int
		err := j.call("plan", func() error {
			plan, err := ix.Plan(spec.Params)
			if err == nil {
				total = plan.Len()
			}
			return err
		})
		if err != nil {
			return core.WrapOp("plan", err)
		}
		if total < 0 || total > jobs.MaxShards {
			return fmt.Errorf("plan has %d shards; a job has 0 to %d", total, jobs.MaxShards)
		}
		j.cp.Total, j.cp.Plan = total, protocol.PlanIndexed
		return nil
	}
	var shards [][]byte
	err := j.call("split", func() (err error) {
		shards, err = impl.Split(ctx, p.planEnv(spec.Type).env, spec.Params)
		return err
	})
	if err != nil {
		return core.WrapOp("split", err)
	}
	if len(shards) > jobs.MaxShards {
		return fmt.Errorf("split made %d shards; the limit is %d", len(shards), jobs.MaxShards)
	}
	for i, s := range shards {
		if len(s) > jobs.MaxShardBytes {
			return fmt.Errorf("shard %d is %d bytes; the limit is %d", i, len(s), jobs.MaxShardBytes)
		}
	}
	if err := p.planShards(ctx, j.id, shards); err != nil {
		return fmt.Errorf("%w: %v", errPlanStorage, err)
	}
	j.cp.Total, j.cp.Plan = len(shards), protocol.PlanPages
	return nil
}

// accept merges the partial (isolated). A panic fails the job: the aggregate may be
// half-updated. An error refuses the result: the aggregate is unchanged (jobs.Aggregate's
// contract) and the shard stays missing until its real result, or self-repair, completes it.
func (a *aggregateRun) accept(ctx context.Context, h runHost, j *job, r *protocol.ResultMsg, partial []byte) mergeOutcome {
	err := j.call("merge", func() error { return a.agg.Merge(partial) })
	if err == nil {
		return mergeDone
	}
	var ue *UserCodeError
	if errors.As(err, &ue) {
		h.fail(j, fmt.Errorf("shard %d: %w", r.Index, err))
		return mergeKept
	}
	return h.refuseResult(ctx, j, r, fmt.Sprintf("result for shard %d of job %s cannot be merged: %v", r.Index, r.Job, err))
}

func (a *aggregateRun) ready(context.Context, runHost, *job) bool { return true }

// state encodes the aggregate: a jobs.Snapshotter in the writer, any other now.
func (a *aggregateRun) state(j *job, final bool) (runState, error) {
	if final {
		// An ended job is never resumed (claim only cleans it up): its checkpoint keeps the
		// result, not the aggregate, which for a large one (a vocabulary) would be most of the
		// write the job's end waits for.
		return runState{encode: func() ([]byte, error) { return nil, nil }}, nil
	}
	typ := j.typ()
	if sn, ok := a.agg.(jobs.Snapshotter); ok {
		var enc func() ([]byte, error)
		if err := core.IsolateErr(typ, "snapshot aggregate", func() error { enc = sn.Snapshot(); return nil }); err != nil {
			return runState{}, err
		}
		// The encoding runs in the writer's goroutine: isolated there too.
		return runState{encode: func() (b []byte, err error) {
			err = core.IsolateErr(typ, "encode aggregate", func() (err error) {
				b, err = enc()
				return err
			})
			return b, err
		}}, nil
	}
	var agg []byte
	err := core.IsolateErr(typ, "encode aggregate", func() (err error) {
		agg, err = a.agg.MarshalBinary()
		return err
	})
	if err != nil {
		return runState{}, err
	}
	return runState{encode: func() ([]byte, error) { return agg, nil }}, nil
}

func (a *aggregateRun) result(j *job) (res json.RawMessage, err error) {
	err = core.IsolateErr(j.typ(), "result", func() (err error) {
		res, err = a.agg.Result()
		return err
	})
	return res, err
}

func (a *aggregateRun) due() bool                                       { return false }
func (a *aggregateRun) adopted(context.Context, runHost, *job)          {}
func (a *aggregateRun) stored(context.Context, runHost, *job, runState) {}

type mergeOutcome int

const (
	mergeDropped mergeOutcome = iota // nothing to keep (duplicate, other plan, job ended)
	mergeKept                        // changed the job: ack after the next checkpoint
	mergeRetry                       // cannot be merged now: hand the message back
	mergeDone                        // a runner's verdict: merged, the shard is done
)

// errPlanStorage: storing a plan failed (storage unavailable); planning may be tried again.
var errPlanStorage = errors.New("store the plan")
