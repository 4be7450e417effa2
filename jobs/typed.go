package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// TypedJob is a job written with Go types instead of bytes: P is its parameters (a struct, decoded
// from JSON by DecodeParams), S its shard and R its partial result. Typed turns it into a Job.
//
//   - Split divides the job into shards; it is called once per job, on the leader, and its result
//     is stored, so it may read storage that later changes.
//   - Map computes one shard's partial, on any worker. It must be a pure function of the shard
//     (and the data the shard names): it may run more than once for a shard, and only one result
//     counts.
//   - Merge combines two partials. It must be associative and commutative, with the zero value of
//     R (or Identity, below) as its identity, so the result equals a sequential run whatever the
//     order. Merge may modify and return a; b is not used again.
//
// Optional methods, found by interface assertion, refine the defaults:
//
//   - P's Validate() error checks the decoded parameters (return a *ParamError, e.g. from
//     BadParam, to name the field). P's Usage() string is an example shown when a field tagged
//     `jobs:"required"` is missing.
//   - S's Validate() error refuses a decoded shard (the error then matches ErrBadShard).
//   - Identity(p P) R: the empty aggregate, when it is not the zero value of R (WithIdentity).
//   - Result(p P, acc R) (any, error): the job's answer, marshalled to JSON, when it is not acc
//     itself (WithResult).
//   - Check(p P, acc, partial R) error: refuses a partial that no run of the job could produce
//     (more samples than the job has, say) before it is merged into acc, and a checkpoint before
//     it is restored (acc the identity). Nothing is merged when it fails (WithCheck).
//   - Count(p P) (int, error) and Shard(p P, i int) (S, error): the plan is a function of the
//     parameters (Split's shard i is Shard(p, i)); the leader stores no plan and makes each shard
//     as it dispatches it (WithIndex, Indexed).
//
// Shards are encoded as JSON (readable when a shard is dead-lettered), bounded by MaxShardBytes;
// partials and checkpoints as JSON too. A type with MarshalBinary and UnmarshalBinary (the latter
// on its pointer) is encoded with them instead.
type TypedJob[P, S, R any] interface {
	Split(ctx context.Context, env Env, params P) ([]S, error)
	Map(ctx context.Context, env Env, shard S) (R, error)
	Merge(a, b R) R
}

// WithIdentity is the optional method of a TypedJob whose empty aggregate is not the zero value
// of R (the least value of a maximum, a slice of one zero per bucket).
type WithIdentity[P, R any] interface {
	Identity(params P) R
}

// WithResult is the optional method of a TypedJob whose answer is not the merged partial itself
// (a mean from a sum and a count). The value is marshalled to JSON.
type WithResult[P, R any] interface {
	Result(params P, acc R) (any, error)
}

// WithCheck is the optional method of a TypedJob that can refuse partials no run of the job could
// produce. Merge fails with ErrBadPartial, and UnmarshalBinary with ErrBadCheckpoint, when Check
// returns an error; the aggregate is then unchanged.
type WithCheck[P, R any] interface {
	Check(params P, acc, partial R) error
}

// Validator is the optional Validate method of parameters and shards.
type Validator interface {
	Validate() error
}

// BadParam returns a *ParamError for field (a JSON name, "" for the parameters as a whole), with
// the reason formatted from format and args. A TypedJob's parameter Validate method returns it;
// Typed fills in the job's type.
func BadParam(field, format string, args ...any) *ParamError {
	return &ParamError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Typed returns the Job of type name that runs job: parameters decoded once into P and
// validated, shards and partials encoded for you, and an Aggregate that merges with job.Merge and
// checkpoints the merged value. Register the result:
//
//	jobs.Register(jobs.Typed("sumsq", SumSquares{}))
//
// Typed panics if P is not a struct type (parameters are a JSON object); the name is checked by
// Register.
func Typed[P, S, R any](name string, job TypedJob[P, S, R]) Job {
	if t := reflect.TypeFor[P](); t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("jobs.Typed(%q): the parameters type %v is not a struct", name, t))
	}
	t := &typed[P, S, R]{name: name, job: job, shards: newCodec[S](MaxShardBytes), partials: newCodec[R](0)}
	if ix, ok := job.(WithIndex[P, S]); ok {
		return &typedIndexed[P, S, R]{typed: t, index: ix}
	}
	return t
}

type typed[P, S, R any] struct {
	name     string
	job      TypedJob[P, S, R]
	shards   codec[S]
	partials codec[R]
}

func (t *typed[P, S, R]) Type() string { return t.name }

func (t *typed[P, S, R]) Validate(raw json.RawMessage) error {
	_, err := t.params(raw)
	return err
}

// params decodes and validates raw parameters.
func (t *typed[P, S, R]) params(raw json.RawMessage) (P, error) {
	var p P
	if _, err := DecodeParams(t.name, raw, &p); err != nil {
		return p, err
	}
	if err := validate(&p); err != nil {
		var pe *ParamError
		if !errors.As(err, &pe) {
			return p, &ParamError{Job: t.name, Reason: err.Error()}
		}
		if pe.Job == "" {
			pe.Job = t.name
		}
		return p, pe
	}
	return p, nil
}

// validate calls v's Validate method, on the value or its pointer, if it has one.
func validate[T any](v *T) error {
	if val, ok := any(*v).(Validator); ok {
		return val.Validate()
	}
	if val, ok := any(v).(Validator); ok {
		return val.Validate()
	}
	return nil
}

func (t *typed[P, S, R]) Split(ctx context.Context, env Env, raw json.RawMessage) ([][]byte, error) {
	p, err := t.params(raw)
	if err != nil {
		return nil, err
	}
	shards, err := t.job.Split(ctx, env, p)
	if err != nil {
		return nil, err
	}
	if len(shards) > MaxShards {
		return nil, fmt.Errorf("%s: split made %d shards, the limit is %d", t.name, len(shards), MaxShards)
	}
	out := make([][]byte, len(shards))
	for i, s := range shards {
		if out[i], err = t.shards.encode(s); err != nil {
			return nil, fmt.Errorf("%s: encode shard %d: %w", t.name, i, err)
		}
	}
	return out, nil
}

func (t *typed[P, S, R]) Map(ctx context.Context, env Env, task Task) ([]byte, error) {
	s, err := t.decodeShard(task.Shard)
	if err != nil {
		return nil, err
	}
	r, err := t.job.Map(withTask(ctx, task), env, s)
	if err != nil {
		return nil, err
	}
	b, err := t.partials.encode(r)
	if err != nil {
		return nil, fmt.Errorf("%s: encode partial: %w", t.name, err)
	}
	return b, nil
}

func (t *typed[P, S, R]) decodeShard(data []byte) (S, error) {
	return decodeShard(t.shards, t.name, data)
}

func decodeShard[S any](c codec[S], job string, data []byte) (S, error) {
	s, err := c.decode(data)
	if err == nil {
		err = validate(&s)
	}
	if err != nil {
		var zero S
		return zero, fmt.Errorf("%w: %s: %v", ErrBadShard, job, err)
	}
	return s, nil
}

// DecodeShard decodes a shard of the typed job named job as its Map does (strictly, then with
// S's Validate method if it has one), so a test can check what a shard holds. Errors match
// ErrBadShard.
func DecodeShard[S any](job string, data []byte) (S, error) {
	return decodeShard(newCodec[S](MaxShardBytes), job, data)
}

// EncodeShard encodes a shard of a typed job as its Split does, so a test can hand Map a shard
// of its own.
func EncodeShard[S any](s S) ([]byte, error) {
	return newCodec[S](MaxShardBytes).encode(s)
}

func (t *typed[P, S, R]) NewAggregate(raw json.RawMessage) (Aggregate, error) {
	p, err := t.params(raw)
	if err != nil {
		return nil, err
	}
	a := &typedAggregate[P, S, R]{t: t, params: p}
	a.acc = a.identity()
	return a, nil
}

// typedAggregate is the Aggregate of a TypedJob: the merged partial so far.
type typedAggregate[P, S, R any] struct {
	t      *typed[P, S, R]
	params P
	acc    R
}

func (a *typedAggregate[P, S, R]) identity() R {
	if id, ok := a.t.job.(WithIdentity[P, R]); ok {
		return id.Identity(a.params)
	}
	var zero R
	return zero
}

func (a *typedAggregate[P, S, R]) check(acc, partial R) error {
	if c, ok := a.t.job.(WithCheck[P, R]); ok {
		return c.Check(a.params, acc, partial)
	}
	return nil
}

// Merge decodes partial, checks it and merges it; on error the aggregate is unchanged.
func (a *typedAggregate[P, S, R]) Merge(partial []byte) error {
	r, err := a.t.partials.decode(partial)
	if err == nil {
		err = a.check(a.acc, r)
	}
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadPartial, a.t.name, err)
	}
	a.acc = a.t.job.Merge(a.acc, r)
	return nil
}

// MarshalBinary encodes the merged value as a partial is encoded.
func (a *typedAggregate[P, S, R]) MarshalBinary() ([]byte, error) {
	b, err := a.t.partials.encode(a.acc)
	if err != nil {
		return nil, fmt.Errorf("%s: encode aggregate: %w", a.t.name, err)
	}
	return b, nil
}

// UnmarshalBinary decodes data as a partial, checks it against an empty aggregate and replaces
// the merged value with it; on error the aggregate is unchanged.
func (a *typedAggregate[P, S, R]) UnmarshalBinary(data []byte) error {
	r, err := a.t.partials.decode(data)
	if err == nil {
		err = a.check(a.identity(), r)
	}
	if err != nil {
		return fmt.Errorf("%w: %s aggregate: %v", ErrBadCheckpoint, a.t.name, err)
	}
	a.acc = r
	return nil
}

// Result returns the job's Result method's value, or the merged value, as JSON.
func (a *typedAggregate[P, S, R]) Result() (json.RawMessage, error) {
	var v any = a.acc
	if res, ok := a.t.job.(WithResult[P, R]); ok {
		var err error
		if v, err = res.Result(a.params, a.acc); err != nil {
			return nil, err
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("%s: encode result: %w", a.t.name, err)
	}
	return b, nil
}

type taskKey struct{}

func withTask(ctx context.Context, task Task) context.Context {
	return context.WithValue(ctx, taskKey{}, task)
}

// TaskFrom returns the task a TypedJob's Map is running (its job id, shard index and attempt), for
// logs or behaviour that depends on the attempt. ok is false outside Map.
func TaskFrom(ctx context.Context) (task Task, ok bool) {
	task, ok = ctx.Value(taskKey{}).(Task)
	return task, ok
}
