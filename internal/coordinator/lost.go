package coordinator

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Jobs whose state the storage lost. A checkpoint write is If-Match on the job's last checkpoint,
// so a refused write usually means a newer leader wrote it, and the term steps down. Two losses
// refuse it too, and stepping down helps in neither: the next leader holds less of the job than
// this term does, and every term that holds it would step down in turn. So before concluding it
// was deposed, the checkpointer looks for the job's checkpoint, and tells the two apart by the
// jobs container's generation (its ETag, read as the term began):
//   - Wiped: the storage account was wiped or the jobs container deleted (store.Container
//     creates it again, with a new generation). The job's input and outputs went with it. If
//     its spec is gone too, the term writes the job's failed status (a new checkpoint,
//     If-None-Match) naming the cause, drops the job and goes on (checkpointer.lose).
//   - Rolled back: the container is the one the term began with, the checkpoint is gone, and the
//     store was in trouble (store.TransientFailures changed) since the job's state was last known
//     whole. The store lost its most recent acknowledged writes: Azurite saves its blob metadata
//     every 5 s, and a kill -9 loses the rest. The term holds the job's whole state, so it writes
//     it back, each blob only if missing: the spec, the active marker and the checkpoint as it
//     holds it; the job goes on (checkpointer.restore). Blobs gone with no trouble in between were
//     deleted (an operator, or a deposed term's successor deleting the ended job): nothing is
//     written back, and the rules above and of fencing apply.
//
// docs/design.md, "Healing what operators, storage and load break".

// LostStateError is the error of a job whose state was lost with the storage.
const LostStateError = "state lost with the storage account"

var (
	// errStateLost: a checkpoint write was refused because the job's state is gone from storage.
	errStateLost = errors.New(LostStateError)
	// errRolledBack: a checkpoint write was refused because the checkpoint is gone from the
	// container the term began with.
	errRolledBack = errors.New("the job's checkpoint is gone from storage that was not wiped (the store lost recent writes)")
)

// exister tells whether a blob exists (the checkpointer's store).
type exister interface {
	Exists(ctx context.Context, name string) (bool, error)
}

// generationer tells the jobs container's generation (store.Container.Generation).
type generationer interface {
	Generation(ctx context.Context) (store.ETag, error)
}

// stateLost explains a refused checkpoint write of job id. It returns errRolledBack (wrapped)
// when the checkpoint is gone and st's generation is still gen (the term's; "" when unknown or
// when the store had no trouble since the job's state was known whole),
// errStateLost (wrapped) when the generation changed or is unknown and the spec is gone too, and
// nil otherwise, or when the storage cannot say (then the refusal is explained as before: a
// newer leader, or a transient error to retry).
func stateLost(ctx context.Context, st exister, id string, gen store.ETag) error {
	if ok, err := st.Exists(ctx, protocol.CheckpointBlob(id)); err != nil || ok {
		return nil
	}
	if g, ok := st.(generationer); ok && gen != "" {
		now, err := g.Generation(ctx)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err == nil && now == gen {
			return fmt.Errorf("job %s: %w", id, errRolledBack)
		}
	}
	if ok, err := st.Exists(ctx, protocol.SpecBlob(id)); err != nil || ok {
		return nil
	}
	return fmt.Errorf("job %s: its checkpoint and spec are gone: %w", id, errStateLost)
}
