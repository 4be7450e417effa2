package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Jobs lost with the storage. A checkpoint write is If-Match on the job's last checkpoint, so a
// refused write usually means a newer leader wrote it, and the term steps down. When the storage
// account was wiped (or the jobs container deleted), the write is refused too: the container is
// created again (store.Container), but the checkpoint is not there to match. Stepping down then
// helps nobody: the next leader holds nothing of the job either, and every term that holds it in
// memory would step down in turn. So before concluding it was deposed, the checkpointer looks
// for the job's checkpoint and spec. Both gone: the job's state went with the storage; the term
// writes the job's failed status (a new checkpoint, If-None-Match) naming the cause, drops the
// job and goes on (docs/design.md, "Healing what operators, storage and load break").

// LostStateError is the error of a job whose state was lost with the storage.
const LostStateError = "state lost with the storage account"

// errStateLost: a checkpoint write was refused because the job's state is gone from storage.
var errStateLost = errors.New(LostStateError)

// stateLost returns errStateLost (wrapped, naming the job) when neither the checkpoint nor the
// spec of job id exists; nil when either does or the storage cannot say (then the refusal is
// explained as before: a newer leader, or a transient error to retry).
func (c *checkpointer) stateLost(ctx context.Context, id string) error {
	for _, name := range []string{protocol.CheckpointBlob(id), protocol.SpecBlob(id)} {
		ok, err := c.store.Exists(ctx, name)
		if err != nil || ok {
			return nil
		}
	}
	return fmt.Errorf("job %s: its checkpoint and spec are gone: %w", id, errStateLost)
}

// lose ends job j, whose state was lost with the storage (why says how that was found): it
// fails with LostStateError, its failed status is stored as a new checkpoint, and it leaves the
// term. The results held for it are acknowledged: nothing is left to merge them into.
func (c *checkpointer) lose(ctx context.Context, j *job, why error) {
	c.log.Error("job's state was lost with the storage; the job fails", "job", j.id, "err", why)
	c.loop.end(j, jobs.StateFailed, LostStateError)
	if j.cp.State != jobs.StateFailed || j.cp.Error != LostStateError {
		// It ended here, but its terminal checkpoint was lost with the rest (and its outputs
		// may be): it failed all the same.
		j.cp.State, j.cp.Error, j.cp.Result = jobs.StateFailed, LostStateError, nil
	}
	j.w.lost = true
	if err := c.now(ctx, j); err != nil {
		// The status cannot be written (the storage is still away): the job leaves the term all
		// the same, as the next write would find the same.
		c.log.Warn("cannot store the failed status of a job lost with the storage", "job", j.id, "err", err)
		j.dirty = false
	}
	j.w.lost = false
	c.ack(j.w.acks)
	j.w.acks = nil
	c.loop.retire(ctx, j)
}
