package jobread

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Reader reads what the term needs of jobs it does not hold: their state, their result,
// their retry. Reads only.
type Reader struct {
	Store jobStore
}

// jobStore is what a Reader reads (Store).
type jobStore interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Exists(ctx context.Context, name string) (bool, error)
	Props(ctx context.Context, name string) (store.Props, error)
}

var _ jobStore = core.Store(nil)

// jobState reads job's state cheaply: the status record of its checkpoint (a HEAD). For a
// checkpoint of an earlier build, without a record: its result copy (succeeded), its active
// marker (running), else its checkpoint, which for an ended job holds no aggregate. It returns
// "" for a job that does not exist (never submitted, or deleted), and StateQueued for one not
// planned yet.
func (r Reader) JobState(ctx context.Context, job string) (jobs.State, error) {
	p, err := r.Store.Props(ctx, protocol.CheckpointBlob(job))
	if errors.Is(err, store.ErrNotFound) {
		if ok, err := r.Store.Exists(ctx, protocol.SpecBlob(job)); err != nil || !ok {
			return "", err
		}
		return jobs.StateQueued, nil
	}
	if err != nil {
		return "", err
	}
	if rec, err := protocol.DecodeStatusRecord(p.Meta); err == nil {
		return rec.State, nil
	}
	if ok, err := r.Store.Exists(ctx, protocol.ResultBlob(job)); err != nil {
		return "", err
	} else if ok {
		return jobs.StateSucceeded, nil
	}
	if ok, err := r.Store.Exists(ctx, protocol.ActiveBlob(job)); err != nil {
		return "", err
	} else if ok {
		return jobs.StateRunning, nil
	}
	data, _, err := r.Store.Get(ctx, protocol.CheckpointBlob(job))
	if err != nil {
		return "", err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return "", fmt.Errorf("checkpoint of %s: %w", job, err)
	}
	return cp.State, nil
}

// Succeeded reports whether job id's checkpoint says it succeeded (its status record: one HEAD;
// a small result has no copy to look for). A checkpoint without a record (an older release's
// re-plan) or an error counts as "no": the job is then claimed as before.
func (r Reader) Succeeded(ctx context.Context, id string) bool {
	p, err := r.Store.Props(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return false
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	return err == nil && rec.State == jobs.StateSucceeded
}

// retryOf returns the job that retries failed job id, if its spec asks for one ("" if not).
func (t Reader) RetryOf(ctx context.Context, id string) (string, error) {
	data, _, err := t.Store.Get(ctx, protocol.SpecBlob(id))
	var spec *protocol.Spec
	if err == nil {
		spec, err = protocol.ParseSpec(data)
	}
	switch {
	case errors.Is(err, store.ErrNotFound), errors.Is(err, protocol.ErrBadSpec):
		return "", nil
	case err != nil:
		return "", err
	case spec.Retries <= 0:
		return "", nil
	}
	next, _ := protocol.RetryJobID(id)
	return next, nil
}
