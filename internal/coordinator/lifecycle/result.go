package lifecycle

import (
	"cmp"
	"context"
	"errors"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// defaultKeepResultMax is the size of a final checkpoint's result and done set up to which they are
// kept in it (see dropResult).
const defaultKeepResultMax = 4 << 10

// copiesResult reports whether a succeeded job's result gets its copy, <job>/result.json: a keyed
// job's output manifest (readers of its outputs and a chain's next job read it there, and a
// program's sessions learn the job's end from it), and a result too large to stay in the final
// checkpoint (dropResult then drops it there). A small value stays in the final checkpoint only,
// which readers read (client.Client.Result, the workers' ended check reads its status record):
// one write fewer on every small job's path (issue 36: a tiny job within 6 requests).
func (t *Lifecycle) copiesResult(cp *protocol.Checkpoint) bool {
	return cp.Kind == protocol.KindKeyed || protocol.IsOutputManifest(cp.Result) || !t.keepsResult(cp)
}

// keepsResult reports whether cp's result stays in its final checkpoint (defaultKeepResultMax).
func (t *Lifecycle) keepsResult(cp *protocol.Checkpoint) bool {
	return len(cp.Result)+len(cp.Done)+len(cp.Aggregate) <= cmp.Or(t.cfg.KeepResultMax, defaultKeepResultMax)
}

// dropResult stores a succeeded job's result once: after clean-up stored its copy
// (<job>/result.json), the terminal checkpoint is written again without it, marked ResultStored.
// The rewrite is If-Match on the checkpoint as read with its status record, and only if that record
// is this checkpoint's (same seq and writer epoch). A checkpoint anyone changed since is left as it
// is (its result then stays in both, as before). The status record is kept as it was. A failure
// here costs only space. The term that stored the final checkpoint knows its ETag and record
// (here), and reads neither.
//
// A small final checkpoint (keepsResult) is not rewritten: a keyed job's small manifest then stays
// in both. Dropping it would save at most 4 KiB of storage for one more write, and storage
// requests, not bytes, bound how many small jobs a second the cluster takes in.
func (t *Lifecycle) dropResult(ctx context.Context, cp *protocol.Checkpoint, here Ended) {
	if len(cp.Result) == 0 || t.keepsResult(cp) {
		return
	}
	name := protocol.CheckpointBlob(cp.Job)
	p := store.Props{ETag: here.ETag, Meta: here.Meta}
	if p.ETag == "" {
		var err error
		if p, err = t.store.Props(ctx, name); err != nil {
			return
		}
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	if err != nil || rec.Seq != cp.Seq || rec.Epoch != cp.WriterEpoch || rec.State != cp.State {
		return
	}
	next := *cp
	next.Result, next.ResultStored, next.Done, next.Aggregate = nil, true, nil, nil
	data, err := next.Encode()
	if err != nil {
		return
	}
	if _, err := t.store.PutMeta(ctx, name, data, p.Meta, store.Cond{IfMatch: p.ETag}); err != nil && !errors.Is(err, store.ErrConflict) {
		t.log.Warn("drop the result from the final checkpoint", "job", cp.Job, "err", err)
	}
}
