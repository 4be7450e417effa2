package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Jobs lost with the storage. A checkpoint write is If-Match on the job's last checkpoint, so a
// refused write usually means a newer leader wrote it, and the term steps down. When the storage
// account was wiped (or the jobs container deleted), the write is refused too: the container is
// created again (store.Container), but the checkpoint is not there to match. Stepping down then
// helps nobody: the next leader holds nothing of the job either, and every term that holds it in
// memory would step down in turn. So before concluding it was deposed, the checkpointer looks
// for the job's checkpoint and spec. Both gone: the job's state went with the storage; the term
// writes the job's failed status (a new checkpoint, If-None-Match) naming the cause, drops the
// job and goes on (checkpointer.lose, checkpoint.go; docs/design.md, "Healing what operators,
// storage and load break").

// LostStateError is the error of a job whose state was lost with the storage.
const LostStateError = "state lost with the storage account"

// errStateLost: a checkpoint write was refused because the job's state is gone from storage.
var errStateLost = errors.New(LostStateError)

// exister tells whether a blob exists (the checkpointer's store).
type exister interface {
	Exists(ctx context.Context, name string) (bool, error)
}

// stateLost returns errStateLost (wrapped, naming the job) when neither the checkpoint nor the
// spec of job id exists in st; nil when either does or the storage cannot say (then the refusal
// is explained as before: a newer leader, or a transient error to retry).
func stateLost(ctx context.Context, st exister, id string) error {
	for _, name := range []string{protocol.CheckpointBlob(id), protocol.SpecBlob(id)} {
		ok, err := st.Exists(ctx, name)
		if err != nil || ok {
			return nil
		}
	}
	return fmt.Errorf("job %s: its checkpoint and spec are gone: %w", id, errStateLost)
}
