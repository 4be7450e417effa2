package jobstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Delete removes everything an ended job left: its stream messages (with Purge), its spec,
// checkpoint, plan pages, result, outputs and markers. A job that has not ended is refused
// (ErrRunning): cancel it first. Deleting a deleted job is ErrNoSuchJob.
func (j *Jobs) Delete(ctx context.Context, id string) error {
	st, err := j.Status(ctx, id)
	if err != nil {
		return err
	}
	if !st.State.Terminal() {
		return fmt.Errorf("%w: job %s is %s: cancel it first (`cancel %s`), then delete it", ErrRunning, id, st.State, id)
	}
	at := st.UpdatedAt
	if st.FinishedAt != nil {
		at = *st.FinishedAt
	}
	marker := ""
	if !at.IsZero() {
		marker = protocol.EndedBlob(id, st.State, at)
	}
	return j.remove(ctx, id, marker)
}

// Expire is the leader's Delete of job id, found by its ended marker: fenced (Fence) on the
// job's checkpoint, which must say it ended. A job whose checkpoint is gone is one a deletion
// stopped half-way: Expire finishes it. The marker goes last.
func (j *Jobs) Expire(ctx context.Context, id, marker string) error {
	data, _, err := j.Store.Get(ctx, protocol.CheckpointBlob(id))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return err
	default:
		cp, err := protocol.DecodeCheckpoint(data)
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if j.Fence != nil {
			if err := j.Fence(cp); err != nil {
				return err
			}
		}
		if !cp.State.Terminal() {
			return fmt.Errorf("%w: job %s is %s", ErrRunning, id, cp.State)
		}
	}
	return j.remove(ctx, id, marker)
}

// remove deletes job id: its stream messages, its blobs (the spec last), its active marker,
// then its ended marker (if named).
func (j *Jobs) remove(ctx context.Context, id, marker string) error {
	if j.Purge != nil {
		if err := j.Purge.PurgeJobMessages(ctx, id); err != nil {
			return err
		}
	}
	// Twice: a leader's clean-up finishing as the job is deleted may write its result copy.
	for range 2 {
		blobs, err := j.Store.List(ctx, id+"/")
		if err != nil {
			return err
		}
		for _, b := range blobs {
			if b.Name == protocol.SpecBlob(id) {
				continue // last: the job exists until everything else is gone
			}
			if err := j.Store.Delete(ctx, b.Name); err != nil {
				return fmt.Errorf("delete %s: %w", b.Name, err)
			}
		}
	}
	if err := j.Store.Delete(ctx, protocol.ActiveBlob(id)); err != nil {
		return err
	}
	if err := j.Store.Delete(ctx, protocol.SpecBlob(id)); err != nil {
		return err
	}
	if marker == "" {
		return nil
	}
	// After the spec: a marker left by a deletion that stopped here makes retention finish it.
	return j.Store.Delete(ctx, marker)
}
