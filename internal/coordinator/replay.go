package coordinator

import (
	"context"

	"github.com/mapagg/mapagg/internal/protocol"
)

// resultStored reports whether job id's result is stored, which only a job that succeeded has.
// An error counts as "no": the job is then claimed as before.
func (t *term) resultStored(ctx context.Context, id string) bool {
	ok, err := t.store.Exists(ctx, protocol.ResultBlob(id))
	return err == nil && ok
}
