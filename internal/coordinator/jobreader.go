package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// jobReader reads what the term needs of jobs it does not hold: their state, their result,
// their retry. Reads only.
type jobReader struct {
	store jobStore
}

// jobStore is what a jobReader reads (Store).
type jobStore interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Exists(ctx context.Context, name string) (bool, error)
	Props(ctx context.Context, name string) (store.Props, error)
}

var _ jobStore = Store(nil)

// jobState reads job's state cheaply: the status record of its checkpoint (a HEAD). For a
// checkpoint of an earlier build, without a record: its result copy (succeeded), its active
// marker (running), else its checkpoint, which for an ended job holds no aggregate. It returns
// "" for a job that does not exist (never submitted, or deleted), and StateQueued for one not
// planned yet.
func (r jobReader) jobState(ctx context.Context, job string) (jobs.State, error) {
	p, err := r.store.Props(ctx, protocol.CheckpointBlob(job))
	if errors.Is(err, store.ErrNotFound) {
		if ok, err := r.store.Exists(ctx, protocol.SpecBlob(job)); err != nil || !ok {
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
	if ok, err := r.store.Exists(ctx, protocol.ResultBlob(job)); err != nil {
		return "", err
	} else if ok {
		return jobs.StateSucceeded, nil
	}
	if ok, err := r.store.Exists(ctx, protocol.ActiveBlob(job)); err != nil {
		return "", err
	} else if ok {
		return jobs.StateRunning, nil
	}
	data, _, err := r.store.Get(ctx, protocol.CheckpointBlob(job))
	if err != nil {
		return "", err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return "", fmt.Errorf("checkpoint of %s: %w", job, err)
	}
	return cp.State, nil
}

// resultStored reports whether job id's result is stored, which only a job that succeeded has.
// An error counts as "no": the job is then claimed as before.
func (r jobReader) resultStored(ctx context.Context, id string) bool {
	ok, err := r.store.Exists(ctx, protocol.ResultBlob(id))
	return err == nil && ok
}
