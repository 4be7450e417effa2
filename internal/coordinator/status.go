package coordinator

import (
	"log/slog"

	"github.com/mapagg/mapagg/internal/protocol"
)

// statusMeta is cp's status record as blob metadata, stored with the checkpoint in one
// conditional write, so it is fenced like it and never disagrees with it. spec may be nil (not
// read): the record then lacks priority and submit time. It is nil if it cannot be encoded (a
// checkpoint is never kept from being stored: status then reads as unknown).
func statusMeta(log *slog.Logger, cp *protocol.Checkpoint, spec *protocol.Spec) map[string]string {
	meta, err := protocol.NewStatusRecord(cp, spec).Metadata()
	if err != nil {
		log.Warn("status record", "job", cp.Job, "err", err)
		return nil
	}
	return meta
}
