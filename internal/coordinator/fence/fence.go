// Package fence is a leader term's fencing: its epoch and id, and the checks of what other terms
// wrote.
//
// Fencing across a storage rollback. A term's epoch comes from the lease blob's metadata. If the
// store loses acknowledged writes (Azurite keeps blob metadata in memory and saves it every 5 s),
// that epoch can go back in time. A new term can then get an epoch already used, or a lower one. So
// every checkpoint also names the term that wrote it (Checkpoint.WriterTerm, a random id per term).
// A term yields — stops with core.ErrDeposed — when it finds a checkpoint written by a higher epoch, or
// by its own epoch under another term. Either way it records the epoch (HighestEpochSeen), and the
// process raises its elector's epoch floor above it, so its next term takes an epoch no term has
// used. Two terms of one epoch thus never both write: the first conditional write of each (the
// claim) reads the other's checkpoint first.
package fence

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Fence is a term's identity for fencing: its epoch and id, and the checks of what others wrote.
// Every component that writes fenced state holds the term's fence.
type Fence struct {
	Epoch uint64
	ID    string // random: tells this term from another that got the same epoch
	lg    *slog.Logger
	cps   checkpointGetter
	saw   func(epoch uint64) // records the highest epoch seen (Coordinator.sawEpoch)
}

// checkpointGetter reads a checkpoint again after a conflict (Store).
type checkpointGetter interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
}

var _ checkpointGetter = core.Store(nil)

func New(epoch uint64, log *slog.Logger, cps checkpointGetter, saw func(uint64)) *Fence {
	return &Fence{Epoch: epoch, ID: newTermID(), lg: log, cps: cps, saw: saw}
}

// newTermID returns a random 8-byte id in hex.
func newTermID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Name describes this term for people: "term 1a2b… of epoch 7".
func (t *Fence) Name() string { return fmt.Sprintf("term %s of epoch %d", t.ID, t.Epoch) }

// writerName describes the term that wrote cp.
func writerName(cp *protocol.Checkpoint) string {
	if cp.WriterTerm == "" {
		return fmt.Sprintf("a term of epoch %d (of an earlier build)", cp.WriterEpoch)
	}
	return fmt.Sprintf("term %s of epoch %d", cp.WriterTerm, cp.WriterEpoch)
}

// Fenced returns core.ErrDeposed when cp was written by a term this one must yield to: a higher
// epoch, or this epoch under another term.
func (t *Fence) Fenced(cp *protocol.Checkpoint) error {
	t.saw(cp.WriterEpoch)
	switch {
	case cp.WriterEpoch > t.Epoch:
		return fmt.Errorf("%w: job %s was checkpointed by %s, newer than this %s", core.ErrDeposed, cp.Job, writerName(cp), t.Name())
	case cp.WriterEpoch == t.Epoch && cp.WriterTerm != t.ID:
		t.lg.Error("two terms got the same epoch: the lease blob's epoch went back in time (storage lost writes); stepping down so that the next term's epoch is above it",
			"job", cp.Job, "writer", writerName(cp))
		return fmt.Errorf("%w: job %s was checkpointed by %s, another term with this term's epoch (this is %s); the next term takes an epoch above %d",
			core.ErrDeposed, cp.Job, writerName(cp), t.Name(), cp.WriterEpoch)
	}
	return nil
}

// Conflict explains a failed conditional write: a higher epoch means this leader is deposed; a
// lower one (possible only while claiming) means a deposed leader wrote late: re-read.
func (t *Fence) Conflict(ctx context.Context, id string) error {
	data, _, err := t.cps.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed and cannot be re-read: %v", core.ErrDeposed, id, err)
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed: %v", core.ErrDeposed, id, err)
	}
	if cp.WriterEpoch < t.Epoch {
		t.saw(cp.WriterEpoch)
		return core.ErrRetryClaim
	}
	if err := t.Fenced(cp); err != nil {
		return err
	}
	return fmt.Errorf("%w: the checkpoint of %s changed under a write of this term (%s)", core.ErrDeposed, id, t.Name())
}

// FencedBy returns core.ErrDeposed when a blob was written by a term this one must yield to (a
// higher epoch, or this epoch under another term), as Fenced does for checkpoints.
func (t *Fence) FencedBy(epoch uint64, term, what string) error {
	t.saw(epoch)
	switch {
	case epoch > t.Epoch:
		return fmt.Errorf("%w: %s was written by epoch %d, newer than this %s", core.ErrDeposed, what, epoch, t.Name())
	case epoch == t.Epoch && term != t.ID:
		return fmt.Errorf("%w: %s was written by term %s of this term's epoch (this is %s); the next term takes an epoch above %d",
			core.ErrDeposed, what, term, t.Name(), epoch)
	}
	return nil
}
