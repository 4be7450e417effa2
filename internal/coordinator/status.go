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
	return t.store.PutMeta(ctx, protocol.CheckpointBlob(cp.Job), data, t.statusMeta(cp, spec), cond)
}

// statusMeta is cp's status record as blob metadata; nil if it cannot be encoded (a checkpoint
// is never kept from being stored: status then reads as unknown).
func (t *term) statusMeta(cp *protocol.Checkpoint, spec *protocol.Spec) map[string]string {
	meta, err := protocol.NewStatusRecord(cp, spec).Metadata()
	if err != nil {
		t.log.Warn("status record", "job", cp.Job, "err", err)
		return nil
	}
	return meta
}
