package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Store is the jobs container.
type Store interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
	Delete(ctx context.Context, name string) error
	Exists(ctx context.Context, name string) (bool, error)
	ListDirs(ctx context.Context, prefix string) ([]string, error)
}

// Queue is the job intake queue.
type Queue interface {
	Enqueue(ctx context.Context, text string) error
}

// Notifier sends best-effort hints to the leader (bus.Bus.Announce); may be nil.
type Notifier interface {
	Announce(subject string, data []byte) error
}

// Validator checks a job type and its parameters where the type is known: the running cluster
// (node's NATS validator asks a live worker that has the type). It returns nil, an
// *jobs.UnknownTypeError listing the types the cluster knows, the job's own error (a
// *jobs.ParamError, matching jobs.ErrBadParams), or an error saying why it could not ask.
type Validator interface {
	ValidateJob(ctx context.Context, typ string, params json.RawMessage) error
}

// Client submits and inspects jobs. Store and Queue are required; the rest is optional.
type Client struct {
	Store  Store
	Queue  Queue
	Notify Notifier // optional: wakes the leader sooner

	// Registry holds the job types this program has, validated locally (no cluster needed).
	// Nil: none.
	Registry *jobs.Registry
	// Validator validates the types Registry lacks. Nil: such a type is refused as unknown.
	Validator Validator

	Now func() time.Time // default time.Now
}

// Errors.
var (
	ErrNoSuchJob   = errors.New("no such job")
	ErrNotFinished = errors.New("job has not finished")
)

// Status is a job as `worker status` shows it.
type Status struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	State       jobs.State `json:"state"`
	ShardsTotal int        `json:"shards_total"`
	ShardsDone  int        `json:"shards_done"`
	Error       string     `json:"error,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	PlanEpoch   uint64     `json:"plan_epoch,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"` // epoch of the leader that last checkpointed it
	Duplicates  int64      `json:"duplicates"`      // results dropped because their shard was already merged
	// Unreadable is set (and State is StateUnreadable) when List could not read this job's spec
	// or checkpoint: it says why, so one damaged job does not hide the others.
	Unreadable string          `json:"unreadable,omitempty"`
	Result     json.RawMessage `json:"-"`
	// Schedule and Tick: the schedule and tick that made the job; After: the jobs it waits
	// for; RetryOf: the job it retries.
	Schedule string     `json:"schedule,omitempty"`
	Tick     *time.Time `json:"tick,omitempty"`
	After    []string   `json:"after,omitempty"`
	RetryOf  string     `json:"retry_of,omitempty"`
}

// StateUnreadable is the State List reports for a job whose spec or checkpoint cannot be read
// or decoded (Status.Unreadable says why). It is not a state a job is ever stored in.
const StateUnreadable jobs.State = "unreadable"

func (c *Client) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Validate checks a job type and its parameters without writing anything, and returns the spec
// Submit would write. A type in Registry is validated locally; any other goes to Validator.
func (c *Client) Validate(ctx context.Context, typ string, params json.RawMessage) (*protocol.Spec, error) {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	if !json.Valid(params) {
		return nil, fmt.Errorf("%w: params for %s are not valid JSON", jobs.ErrBadParams, typ)
	}
	var job jobs.Job
	var err error
	if c.Registry != nil {
		job, err = c.Registry.Lookup(typ)
	} else {
		err = &jobs.UnknownTypeError{Type: typ}
	}
	switch {
	case err == nil:
		if err := job.Validate(params); err != nil {
			return nil, err
		}
	case errors.Is(err, jobs.ErrUnknownType) && c.Validator != nil:
		if err := c.Validator.ValidateJob(ctx, typ, params); err != nil {
			return nil, err
		}
	default:
		return nil, err
	}
	spec := &protocol.Spec{ID: protocol.NewID(c.now()), Type: typ, Params: params, SubmittedAt: c.now().UTC()}
	if _, err := spec.Encode(); err != nil {
		return nil, err
	}
	return spec, nil
}

// Submit validates a job, writes its spec (If-None-Match) and queues its id. It returns the id.
func (c *Client) Submit(ctx context.Context, typ string, params json.RawMessage) (string, error) {
	spec, err := c.Validate(ctx, typ, params)
	if err != nil {
		return "", err
	}
	data, err := spec.Encode()
	if err != nil {
		return "", err
	}
	if _, err := c.Store.Put(ctx, protocol.SpecBlob(spec.ID), data, store.Cond{IfNoneMatch: true}); err != nil {
		return "", fmt.Errorf("write spec: %w", err)
	}
	if err := c.Queue.Enqueue(ctx, spec.ID); err != nil {
		_ = c.Store.Delete(context.WithoutCancel(ctx), protocol.SpecBlob(spec.ID))
		return "", fmt.Errorf("queue job: %w", err)
	}
	if c.Notify != nil {
		_ = c.Notify.Announce("ctl.submitted", []byte(spec.ID))
	}
	return spec.ID, nil
}

// Status reads one job's state from storage.
func (c *Client) Status(ctx context.Context, id string) (*Status, error) {
	if err := protocol.CheckID(id); err != nil {
		return nil, err
	}
	data, _, err := c.Store.Get(ctx, protocol.SpecBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoSuchJob, id)
	}
	if err != nil {
		return nil, err
	}
	spec, err := protocol.ParseSpec(data)
	if err != nil {
		return nil, err
	}
	st := &Status{ID: id, Type: spec.Type, State: jobs.StateQueued, SubmittedAt: spec.SubmittedAt}
	st.Schedule, st.Tick, st.After, st.RetryOf = spec.Schedule, spec.Tick, spec.After, spec.RetryOf
	data, _, err = c.Store.Get(ctx, protocol.CheckpointBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return nil, err
	}
	st.State, st.ShardsTotal, st.ShardsDone, st.Error = cp.State, cp.Total, cp.DoneCount, cp.Error
	st.PlanEpoch, st.Epoch, st.Duplicates, st.Result, st.FinishedAt = cp.PlanEpoch, cp.WriterEpoch, cp.Duplicates, cp.Result, cp.FinishedAt
	upd := cp.UpdatedAt
	st.UpdatedAt = &upd
	return st, nil
}

// List returns the status of the limit most recent jobs (all when limit <= 0), newest last. Job ids
// sort by submission time to the second; jobs submitted within one second are in no given order.
func (c *Client) List(ctx context.Context, limit int) ([]Status, error) {
	dirs, err := c.Store.ListDirs(ctx, "")
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	var ids []string
	for _, d := range dirs {
		if protocol.CheckID(d) == nil && d+"/" != protocol.ActivePrefix {
			ids = append(ids, d)
		}
	}
	sort.Strings(ids)
	// Newest first until limit jobs are found: a folder without a spec (e.g. wordcount input
	// data) does not count towards the limit.
	var out []Status
	for i := len(ids) - 1; i >= 0 && (limit <= 0 || len(out) < limit); i-- {
		st, err := c.Status(ctx, ids[i])
		if errors.Is(err, ErrNoSuchJob) {
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("status of %s: %w", ids[i], err)
			}
			// One damaged job must not hide the others: show it with what is wrong.
			st = &Status{ID: ids[i], State: StateUnreadable, Unreadable: err.Error()}
		}
		out = append(out, *st)
	}
	slices.Reverse(out)
	return out, nil
}

// Result returns a finished job's result JSON.
func (c *Client) Result(ctx context.Context, id string) (json.RawMessage, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	switch st.State {
	case jobs.StateSucceeded:
		return st.Result, nil
	case jobs.StateFailed, jobs.StateCancelled:
		return nil, fmt.Errorf("job %s %s: %s", id, st.State, st.Error)
	default:
		return nil, fmt.Errorf("%w: job %s is %s (%d of %d shards done)", ErrNotFinished, id, st.State, st.ShardsDone, st.ShardsTotal)
	}
}

// Cancel asks the leader to cancel a job: it leaves a marker in storage (read by every leader)
// and sends a hint over NATS.
func (c *Client) Cancel(ctx context.Context, id string) (*Status, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	if st.State.Terminal() {
		return st, fmt.Errorf("job %s has already %s", id, st.State)
	}
	if _, err := c.Store.Put(ctx, protocol.CancelBlob(id), []byte(c.now().UTC().Format(time.RFC3339Nano)), store.Cond{}); err != nil {
		return nil, fmt.Errorf("write cancel marker: %w", err)
	}
	if c.Notify != nil {
		_ = c.Notify.Announce("ctl.cancel", []byte(id))
	}
	return st, nil
}

// Wait polls a job until it ends or ctx does, calling progress (if not nil) on every change.
func (c *Client) Wait(ctx context.Context, id string, every time.Duration, progress func(Status)) (*Status, error) {
	var last Status
	for {
		st, err := c.Status(ctx, id)
		if err != nil && !isTransient(err) {
			return nil, err
		}
		if err == nil {
			if progress != nil && (st.State != last.State || st.ShardsDone != last.ShardsDone || st.ShardsTotal != last.ShardsTotal) {
				progress(*st)
			}
			last = *st
			if st.State.Terminal() {
				return st, nil
			}
		}
		select {
		case <-ctx.Done():
			return &last, ctx.Err()
		case <-time.After(every):
		}
	}
}

func isTransient(err error) bool {
	for _, perm := range []error{ErrNoSuchJob, protocol.ErrBadID, protocol.ErrBadSpec, jobs.ErrBadCheckpoint} {
		if errors.Is(err, perm) {
			return false
		}
	}
	return true
}
