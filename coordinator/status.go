package coordinator

import (
	"context"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// putCheckpoint stores a job's encoded checkpoint cp with its status record as the blob's
// metadata, in one conditional write: the record is fenced like the checkpoint and never
// disagrees with it. spec may be nil (not read): the record then lacks priority and submit time.
func (t *term) putCheckpoint(ctx context.Context, data []byte, cp *protocol.Checkpoint, spec *protocol.Spec, cond store.Cond) (store.ETag, error) {
	meta, err := protocol.NewStatusRecord(cp, spec).Metadata()
	if err != nil {
		// Never keep a checkpoint from being stored: status then reads as unknown.
		t.log.Warn("status record", "job", cp.Job, "err", err)
		meta = nil
	}
	return t.store.PutMeta(ctx, protocol.CheckpointBlob(cp.Job), data, meta, cond)
}
