package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Lifecycle is the component that sees jobs out: the clean-up after a job ends (finish.go), its
// automatic retry (retry.go), its ended marker and its deletion when its retention passes
// (retention.go, retention_migrate.go). Its writes are fenced by the term's fence; it holds no
// job of the loop's, only their stored checkpoints.
type Lifecycle struct {
	fence *fence.Fence
	log   *slog.Logger
	emit  func(core.Event)
	cfg   core.Config
	store core.Store
	queue delayedQueue
	bus   purger
	Sweep *Sweeper // deletes ended jobs' active markers in batches (sweep.go)
}

// delayedQueue queues a job to become visible later (core.Queue): retries.
type delayedQueue interface {
	EnqueueAfter(ctx context.Context, text string, delay time.Duration) error
}

// purger drops a job's messages from the streams (core.Bus).
type purger interface {
	PurgeJob(ctx context.Context, job string) error
	PurgeJobMessages(ctx context.Context, job string) error
}

var (
	_ delayedQueue = core.Queue(nil)
	_ purger       = core.Bus(nil)
)

// Ended is what the term that ended a job knows of it, which spares its clean-up reads.
type Ended struct {
	ETag store.ETag        // the final checkpoint's ETag ("": not known)
	Meta map[string]string // the status record stored with it
	// Partials: large partials of the job may exist (their folder is listed). A job this term
	// planned, and of which no result named one, has none.
	Partials bool
	// Sweep: the active marker goes to the term's Sweeper (sweep.go), not deleted at once.
	Sweep bool
	// Unmarked: no active marker was written (a small job that ended in its first write).
	Unmarked bool
	// Troubles is store.TransientFailures before the final checkpoint was written (0: not
	// known). A change since says the store was in trouble: an emulator that restarted may have
	// lost that checkpoint (rolledBack).
	Troubles uint64
}

// cleanup runs after a job's terminal checkpoint: the result copy, the queued shards, the large
// partials and the active marker. Each step is idempotent; a leader that dies half-way leaves the
// rest to the next one (claim calls cleanup for terminal jobs still marked active).
func (l *Lifecycle) Cleanup(ctx context.Context, cp *protocol.Checkpoint) {
	l.Clean(ctx, cp, Ended{Partials: true})
}

// clean is cleanup with what the term that ended the job knows. It reports whether it handed the
// active marker to the Sweeper (here.Sweep).
func (l *Lifecycle) Clean(ctx context.Context, cp *protocol.Checkpoint, here Ended) (swept bool) {
	id := cp.Job
	if cp.State == jobs.StateSucceeded && !cp.ResultStored && l.copiesResult(cp) {
		if _, err := l.store.Put(ctx, protocol.ResultBlob(id), cp.Result, store.Cond{}); err != nil {
			l.log.Warn("write result copy", "job", id, "err", err)
			return false // keep the marker: the next pass retries
		}
		l.dropResult(ctx, cp, here) // result.go
	} else if cp.State != jobs.StateSucceeded {
		if err := l.bus.PurgeJob(ctx, id); err != nil {
			l.log.Warn("purge shards", "job", id, "err", err)
		}
	}
	if here.Partials {
		if parts, err := l.store.List(ctx, protocol.PartialsPrefix(id)); err == nil {
			for _, p := range parts {
				_ = l.store.Delete(ctx, p.Name)
			}
		}
	}
	l.deletePlan(ctx, cp)
	l.cleanupKeyed(ctx, cp) // keyed.go
	if !l.retryFailed(ctx, cp) {
		return false // keep the marker: the next pass retries (retry.go)
	}
	if err := l.MarkEnded(ctx, cp); err != nil {
		l.log.Warn("job ended", "job", id, "err", err)
		return false // keep the marker: the next pass retries (retention.go)
	}
	if l.KeepIfRolledBack(ctx, id, here) {
		return false
	}
	if here.Unmarked {
		return false
	}
	if here.Sweep {
		l.Sweep.Add(id, here)
		return true
	}
	if err := l.store.Delete(ctx, protocol.ActiveBlob(id)); err != nil {
		l.log.Warn("delete active marker", "job", id, "err", err)
	}
	// The store's trouble may have begun while the delete waited (an emulator killed and
	// started again): the delete went through, the final checkpoint may not have.
	l.KeepIfRolledBack(ctx, id, here)
	return false
}

// KeepIfRolledBack reports whether the store lost job id's final checkpoint after the term
// wrote it: the store was in trouble since (here.Troubles), and the checkpoint stored is no
// longer the one written (here.ETag). Without trouble it asks nothing. A job whose checkpoint
// was lost keeps its active marker (it is written again): the next rescan claims the job from
// what is stored and runs again what the lost checkpoint had done. Deleting it would leave the
// job "running" in storage with nobody holding it.
func (l *Lifecycle) KeepIfRolledBack(ctx context.Context, id string, here Ended) bool {
	if here.ETag == "" || here.Troubles == store.TransientFailures() {
		return false
	}
	p, err := l.store.Props(ctx, protocol.CheckpointBlob(id))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return false // the storage cannot say: as before
	}
	if err == nil && strings.Trim(string(p.ETag), `"`) == strings.Trim(string(here.ETag), `"`) {
		return false
	}
	l.log.Warn("the job's final checkpoint is gone from storage (the store lost recent writes); keeping its active marker so that it is claimed again", "job", id)
	if _, err := l.store.Put(ctx, protocol.ActiveBlob(id), nil, store.Cond{}); err != nil {
		l.log.Warn("write active marker", "job", id, "err", err)
	}
	return true
}

// deletePlan removes a finished job's stored plan pages (an indexed plan stored none).
func (l *Lifecycle) deletePlan(ctx context.Context, cp *protocol.Checkpoint) {
	if cp.Plan != protocol.PlanPages {
		return
	}
	pages, err := l.store.List(ctx, protocol.PlanPrefix(cp.Job, cp.PlanEpoch))
	if err != nil {
		l.log.Warn("list plan pages", "job", cp.Job, "err", err)
		return
	}
	for _, p := range pages {
		_ = l.store.Delete(ctx, p.Name)
	}
}

// cleanupKeyed deletes an ended keyed job's intermediates, found by listing (so a leader after a
// failover finds a dead attempt's too): every map run, the map manifest, and every output blob
// the result does not name.
func (t *Lifecycle) cleanupKeyed(ctx context.Context, cp *protocol.Checkpoint) {
	id := cp.Job
	keep := map[string]bool{}
	if cp.State == jobs.StateSucceeded {
		res := []byte(cp.Result)
		if len(res) == 0 {
			data, _, err := t.store.Get(ctx, protocol.ResultBlob(id))
			if err != nil {
				t.log.Warn("read the result for clean-up", "job", id, "err", err)
				return
			}
			res = data
		}
		m, err := protocol.DecodeOutputManifest(id, res)
		if errors.Is(err, protocol.ErrNotOutput) {
			return // an aggregate job
		}
		if err != nil {
			t.log.Warn("output manifest unreadable; outputs kept", "job", id, "err", err)
			return
		}
		for _, p := range m.Partitions {
			keep[p.Blob] = true
		}
	}
	for _, prefix := range []string{protocol.MapPrefix(id), protocol.OutputPrefix(id)} {
		blobs, err := t.store.List(ctx, prefix)
		if err != nil {
			t.log.Warn("list intermediates", "job", id, "prefix", prefix, "err", err)
			continue
		}
		for _, b := range blobs {
			if !keep[b.Name] {
				if err := t.store.Delete(ctx, b.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
					t.log.Warn("delete intermediate", "job", id, "blob", b.Name, "err", err)
				}
			}
		}
	}
	if err := t.store.Delete(ctx, protocol.MapManifestBlob(id)); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.log.Warn("delete the map manifest", "job", id, "err", err)
	}
	if cp.State != jobs.StateSucceeded {
		// Only a succeeded job has an output manifest (result.json): a stale one must not read
		// as this job's answer.
		if err := t.store.Delete(ctx, protocol.ResultBlob(id)); err != nil && !errors.Is(err, store.ErrNotFound) {
			t.log.Warn("delete the result of a job that did not succeed", "job", id, "err", err)
		}
	}
}

// New returns the lifecycle of a term: its writes fenced by f, its events sent to emit.
func New(f *fence.Fence, log *slog.Logger, emit func(core.Event), cfg core.Config, st core.Store, q delayedQueue, b purger) *Lifecycle {
	return &Lifecycle{fence: f, log: log, emit: emit, cfg: cfg, store: st, queue: q, bus: b}
}
