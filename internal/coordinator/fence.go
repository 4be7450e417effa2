package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Fencing across a storage rollback. A term's epoch comes from the lease blob's metadata. If the
// store loses acknowledged writes (Azurite keeps blob metadata in memory and saves it every 5 s),
// that epoch can go back in time. A new term can then get an epoch already used, or a lower one. So
// every checkpoint also names the term that wrote it (Checkpoint.WriterTerm, a random id per term).
// A term yields — stops with ErrDeposed — when it finds a checkpoint written by a higher epoch, or
// by its own epoch under another term. Either way it records the epoch (HighestEpochSeen), and the
// process raises its elector's epoch floor above it, so its next term takes an epoch no term has
// used. Two terms of one epoch thus never both write: the first conditional write of each (the
// claim) reads the other's checkpoint first.

// fence is a term's identity for fencing: its epoch and id, and the checks of what others wrote.
// Every component that writes fenced state holds the term's fence.
type fence struct {
	epoch uint64
	id    string // random: tells this term from another that got the same epoch
	lg    *slog.Logger
	cps   checkpointGetter
	saw   func(epoch uint64) // records the highest epoch seen (Coordinator.sawEpoch)
}

// checkpointGetter reads a checkpoint again after a conflict (Store).
type checkpointGetter interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
}

var _ checkpointGetter = Store(nil)

func newFence(epoch uint64, log *slog.Logger, cps checkpointGetter, saw func(uint64)) *fence {
	return &fence{epoch: epoch, id: newTermID(), lg: log, cps: cps, saw: saw}
}

// newTermID returns a random 8-byte id in hex.
func newTermID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// name describes this term for people: "term 1a2b… of epoch 7".
func (t *fence) name() string { return fmt.Sprintf("term %s of epoch %d", t.id, t.epoch) }

// writerName describes the term that wrote cp.
func writerName(cp *protocol.Checkpoint) string {
	if cp.WriterTerm == "" {
		return fmt.Sprintf("a term of epoch %d (of an earlier build)", cp.WriterEpoch)
	}
	return fmt.Sprintf("term %s of epoch %d", cp.WriterTerm, cp.WriterEpoch)
}

// fenced returns ErrDeposed when cp was written by a term this one must yield to: a higher
// epoch, or this epoch under another term.
func (t *fence) fenced(cp *protocol.Checkpoint) error {
	t.saw(cp.WriterEpoch)
	switch {
	case cp.WriterEpoch > t.epoch:
		return fmt.Errorf("%w: job %s was checkpointed by %s, newer than this %s", ErrDeposed, cp.Job, writerName(cp), t.name())
	case cp.WriterEpoch == t.epoch && cp.WriterTerm != t.id:
		t.lg.Error("two terms got the same epoch: the lease blob's epoch went back in time (storage lost writes); stepping down so that the next term's epoch is above it",
			"job", cp.Job, "writer", writerName(cp))
		return fmt.Errorf("%w: job %s was checkpointed by %s, another term with this term's epoch (this is %s); the next term takes an epoch above %d",
			ErrDeposed, cp.Job, writerName(cp), t.name(), cp.WriterEpoch)
	}
	return nil
}

// conflict explains a failed conditional write: a higher epoch means this leader is deposed; a
// lower one (possible only while claiming) means a deposed leader wrote late: re-read.
func (t *fence) conflict(ctx context.Context, id string) error {
	data, _, err := t.cps.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed and cannot be re-read: %v", ErrDeposed, id, err)
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return fmt.Errorf("%w: checkpoint of %s changed: %v", ErrDeposed, id, err)
	}
	if cp.WriterEpoch < t.epoch {
		t.saw(cp.WriterEpoch)
		return errRetryClaim
	}
	if err := t.fenced(cp); err != nil {
		return err
	}
	return fmt.Errorf("%w: the checkpoint of %s changed under a write of this term (%s)", ErrDeposed, id, t.name())
}

// fencedBy returns ErrDeposed when a blob was written by a term this one must yield to (a
// higher epoch, or this epoch under another term), as fenced does for checkpoints.
func (t *fence) fencedBy(epoch uint64, term, what string) error {
	t.saw(epoch)
	switch {
	case epoch > t.epoch:
		return fmt.Errorf("%w: %s was written by epoch %d, newer than this %s", ErrDeposed, what, epoch, t.name())
	case epoch == t.epoch && term != t.id:
		return fmt.Errorf("%w: %s was written by term %s of this term's epoch (this is %s); the next term takes an epoch above %d",
			ErrDeposed, what, term, t.name(), epoch)
	}
	return nil
}
