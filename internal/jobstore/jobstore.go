package jobstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Store is the jobs container (store.Container).
type Store interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
	Delete(ctx context.Context, name string) error
	Exists(ctx context.Context, name string) (bool, error)
	List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error)
	// Props reads a blob's metadata: a checkpoint's status record.
	Props(ctx context.Context, name string) (store.Props, error)
}

// Queue is the job intake queue (queue.Queue).
type Queue interface {
	Enqueue(ctx context.Context, text string) error
}

// DelayQueue queues a message that becomes visible after a delay (queue.Queue): the leader's
// retries wait out a backoff.
type DelayQueue interface {
	EnqueueAfter(ctx context.Context, text string, delay time.Duration) error
}

// Notifier sends best-effort hints to the leader (bus.Bus.Announce).
type Notifier interface {
	Announce(subject string, data []byte) error
}

// Purger removes a job's messages from the streams (bus.Bus).
type Purger interface {
	PurgeJobMessages(ctx context.Context, job string) error
}

var (
	_ Store      = (*store.Container)(nil)
	_ Queue      = (*queue.Queue)(nil)
	_ DelayQueue = (*queue.Queue)(nil)
)

// Jobs is a job's life in storage. Store is required; the rest is what a caller has.
type Jobs struct {
	Store Store
	// Queue takes submitted ids (Submit). Delay takes the leader's retries (SubmitLater).
	Queue Queue
	Delay DelayQueue
	// Notify wakes the leader on a submit; nil: it sees the job at its next queue poll.
	Notify Notifier
	// InlineSpec: Submit writes the spec into the queue message too, so the leader need not
	// read it back. A leader of a release before it cannot read such a message (it
	// dead-letters it): set it once every member runs this release or a later one.
	InlineSpec bool
	// Purge removes a deleted job's stream messages; nil: they age out with the stream.
	Purge Purger
	// Fence checks a checkpoint before the leader deletes its job (coordinator: term.fenced);
	// an error ends the deletion and is returned. Nil: not fenced (a client).
	Fence func(cp *protocol.Checkpoint) error
}

// Errors.
var (
	ErrNoSuchJob = errors.New("no such job")
	// ErrRunning: the job has not ended; cancel it first.
	ErrRunning = errors.New("job has not ended")
)

// StateUnknown is the state of a job whose large checkpoint an earlier build wrote, without a
// status record. It is not a state a job is ever stored in.
const StateUnknown jobs.State = "unknown"

// LegacyCheckpointLimit is the largest checkpoint without a status record (an earlier build's)
// that Status reads; a larger one shows as StateUnknown.
const LegacyCheckpointLimit = 64 << 10

// Spec reads job id's spec (ErrNoSuchJob when it has none).
func (j *Jobs) Spec(ctx context.Context, id string) (*protocol.Spec, error) {
	data, _, err := j.Store.Get(ctx, protocol.SpecBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNoSuchJob, id)
	}
	if err != nil {
		return nil, err
	}
	return protocol.ParseSpec(data)
}

// Status is a job's state as storage holds it.
type Status struct {
	protocol.StatusRecord
	// Note says how the status was read when not from a status record.
	Note string
}

// Status reads job id's state: its status record (the metadata of its checkpoint blob, read with
// a HEAD) and, for a job not yet planned, its spec. It never downloads a checkpoint or a result,
// except a small checkpoint of an earlier build.
func (j *Jobs) Status(ctx context.Context, id string) (*Status, error) {
	if err := protocol.CheckID(id); err != nil {
		return nil, err
	}
	p, err := j.Store.Props(ctx, protocol.CheckpointBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		spec, err := j.Spec(ctx, id)
		if err != nil {
			return nil, err
		}
		st := &Status{StatusRecord: protocol.StatusRecord{Job: id, Type: spec.Type, State: jobs.StateQueued}}
		fromSpec(&st.StatusRecord, spec)
		return st, nil
	}
	if err != nil {
		return nil, err
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	if errors.Is(err, protocol.ErrNoStatusRecord) {
		return j.legacy(ctx, id, p)
	}
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", id, err)
	}
	if rec.SubmittedAt.IsZero() {
		// A job refused or cancelled at intake: its record was written without the spec. A spec
		// that cannot be read is why such a job failed; its record says so.
		if spec, err := j.Spec(ctx, id); err == nil {
			fromSpec(rec, spec)
			if rec.Type == "" {
				rec.Type = spec.Type
			}
		}
	}
	return &Status{StatusRecord: *rec}, nil
}

// fromSpec sets the fields of r that come from the job's spec.
func fromSpec(r *protocol.StatusRecord, spec *protocol.Spec) {
	r.SubmittedAt, r.Priority = spec.SubmittedAt, spec.Priority
	r.Schedule, r.Tick, r.After, r.RetryOf = spec.Schedule, spec.Tick, spec.After, spec.RetryOf
}

// legacy reads a job whose checkpoint an earlier build wrote: from the checkpoint if it is
// small, else as StateUnknown with a note. A running job gets a record from its next
// checkpoint by a leader of this build; only jobs that ended before the upgrade stay so.
func (j *Jobs) legacy(ctx context.Context, id string, p store.Props) (*Status, error) {
	spec, err := j.Spec(ctx, id)
	if err != nil {
		return nil, err
	}
	if p.Size > LegacyCheckpointLimit {
		st := &Status{StatusRecord: protocol.StatusRecord{Job: id, Type: spec.Type, State: StateUnknown,
			SubmittedAt: spec.SubmittedAt, Priority: spec.Priority}}
		st.Note = fmt.Sprintf("written by an older version: its %d-byte checkpoint is not read for status (worker result %s reads a result)", p.Size, id)
		return st, nil
	}
	data, _, err := j.Store.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return nil, err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return nil, err
	}
	r := protocol.NewStatusRecord(cp, spec)
	r.Error = cp.Error
	return &Status{StatusRecord: *r, Note: "written by an older version (read from its checkpoint)"}, nil
}
