package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// The ended-marker migration. Builds before retention left no ended marker, so retention, which
// lists only those markers, would never see the jobs they finished. Once, at a leader's start,
// the leader lists the job folders and writes the marker of each ended job that may lack one.
// It takes RetentionBatch jobs at a time and records how far it got, so a new leader resumes
// where a dead one stopped; when it reaches the end it records that it is done.

// MigrationBlob records the migration's progress in the jobs container.
const MigrationBlob = "migrations/ended-markers.json"

// errMigrationRaced: another term wrote the progress; this one leaves the migration to it.
var errMigrationRaced = errors.New("the ended-marker migration's progress changed under this term")

// migratePause is the pause between two batches: the migration yields to the leader's work.
const migratePause = 100 * time.Millisecond

// migration is MigrationBlob's content.
type Migration struct {
	// After is the last job id handled; ids sort by submission time.
	After string `json:"after,omitempty"`
	Done  bool   `json:"done"`
	// Epoch of the leader that wrote it: a lower term seeing a higher one is deposed.
	Epoch  uint64    `json:"epoch"`
	Marked int       `json:"marked"` // ended markers written so far
	At     time.Time `json:"at"`
}

// dirLister lists virtual folders (store.Container.ListDirs).
type dirLister interface {
	ListDirs(ctx context.Context, prefix string) ([]string, error)
}

var _ dirLister = (*store.Container)(nil)

// migrateEnded runs the migration to its end, unless it was done before. It returns core.ErrDeposed
// when a newer term wrote the progress or a job's checkpoint.
func (t *Lifecycle) migrateEnded(ctx context.Context) error {
	data, etag, err := t.store.Get(ctx, MigrationBlob)
	var m Migration
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return fmt.Errorf("read migration progress: %w", err)
	default:
		if err := json.Unmarshal(data, &m); err != nil {
			t.log.Warn("ended-marker migration: progress unreadable; starting over", "err", err)
			m = Migration{}
		}
	}
	if m.Epoch > t.fence.Epoch {
		return fmt.Errorf("%w: the ended-marker migration was written by epoch %d, newer than this %s", core.ErrDeposed, m.Epoch, t.fence.Name())
	}
	if m.Done {
		return nil
	}
	dl, ok := t.store.(dirLister)
	if !ok {
		t.log.Warn("ended-marker migration: this store cannot list folders; jobs of earlier builds are not expired")
		return nil
	}
	dirs, err := dl.ListDirs(ctx, "")
	if err != nil {
		return fmt.Errorf("list job folders: %w", err)
	}
	var ids []string
	for _, d := range dirs {
		if d > m.After && protocol.CheckID(d) == nil {
			ids = append(ids, d)
		}
	}
	slices.Sort(ids)
	t.log.Info("ended-marker migration", "jobs", len(ids), "after", m.After)
	for len(ids) > 0 {
		n := min(t.cfg.RetentionBatch, len(ids))
		for _, id := range ids[:n] {
			marked, err := t.markOldEnded(ctx, id)
			if err != nil {
				return err
			}
			if marked {
				m.Marked++
			}
		}
		m.After, ids = ids[n-1], ids[n:]
		m.Done = len(ids) == 0
		if etag, err = t.saveMigration(ctx, &m, etag); err != nil {
			return err
		}
		if !m.Done {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(migratePause):
			}
		}
	}
	if !m.Done { // nothing was left to look at
		m.Done = true
		if _, err := t.saveMigration(ctx, &m, etag); err != nil {
			return err
		}
	}
	t.log.Info("ended-marker migration done", "marked", m.Marked)
	return nil
}

// saveMigration writes m conditionally on etag (none: the first write).
func (t *Lifecycle) saveMigration(ctx context.Context, m *Migration, etag store.ETag) (store.ETag, error) {
	m.Epoch, m.At = t.fence.Epoch, t.cfg.Now().UTC()
	data, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	cond := store.Cond{IfMatch: etag}
	if etag == "" {
		cond = store.Cond{IfNoneMatch: true}
	}
	etag, err = t.store.Put(ctx, MigrationBlob, data, cond)
	if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrExists) {
		return "", errMigrationRaced
	}
	if err != nil {
		return "", fmt.Errorf("write migration progress: %w", err)
	}
	return etag, nil
}

// markOldEnded writes the ended marker of job id if it has ended, and says whether it did. A job
// without a checkpoint (queued, or a folder of input data) or still running is left alone: its
// marker comes when it ends. Writing a marker that exists changes nothing.
func (t *Lifecycle) markOldEnded(ctx context.Context, id string) (bool, error) {
	p, err := t.store.Props(ctx, protocol.CheckpointBlob(id))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("ended-marker migration: %s: %w", id, err)
	}
	var state jobs.State
	var epoch uint64
	var at time.Time
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	switch {
	case errors.Is(err, protocol.ErrNoStatusRecord):
		// An earlier build's checkpoint: read it (an ended job's holds no aggregate).
		data, _, err := t.store.Get(ctx, protocol.CheckpointBlob(id))
		if err != nil {
			return false, fmt.Errorf("ended-marker migration: %s: %w", id, err)
		}
		cp, err := protocol.DecodeCheckpoint(data)
		if err != nil {
			t.log.Warn("ended-marker migration: checkpoint unreadable; job left alone", "job", id, "err", err)
			return false, nil
		}
		state, epoch, at = cp.State, cp.WriterEpoch, cp.UpdatedAt
		if cp.FinishedAt != nil {
			at = *cp.FinishedAt
		}
	case err != nil:
		t.log.Warn("ended-marker migration: status record unreadable; job left alone", "job", id, "err", err)
		return false, nil
	default:
		state, epoch, at = rec.State, rec.Epoch, rec.UpdatedAt
		if rec.FinishedAt != nil {
			at = *rec.FinishedAt
		}
	}
	if epoch > t.fence.Epoch {
		return false, fmt.Errorf("%w: job %s was checkpointed by epoch %d, newer than this %s", core.ErrDeposed, id, epoch, t.fence.Name())
	}
	if !state.Terminal() {
		return false, nil
	}
	if _, err := t.store.Put(ctx, protocol.EndedBlob(id, state, at), nil, store.Cond{}); err != nil {
		return false, fmt.Errorf("ended-marker migration: %s: write ended marker: %w", id, err)
	}
	return true, nil
}
