package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Fast tests of the lifecycle's and the fence's rules over in-memory ports (inmem_test.go).

const memJob = "20261201-120000-0000000a"

func (m *memTerm) putSpec(t *testing.T, spec protocol.Spec) {
	t.Helper()
	if spec.Params == nil {
		spec.Params = json.RawMessage(`{}`)
	}
	data, err := spec.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.st.Put(context.Background(), protocol.SpecBlob(spec.ID), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
}

func (m *memTerm) putCheckpoint(t *testing.T, cp protocol.Checkpoint) store.ETag {
	t.Helper()
	cp.Version, cp.PlanEpoch, cp.Type, cp.Seq = protocol.CheckpointVersion, 1, "sleep", 1
	data, err := cp.Encode()
	if err != nil {
		t.Fatal(err)
	}
	etag, err := m.st.Put(context.Background(), protocol.CheckpointBlob(cp.Job), data, store.Cond{})
	if err != nil {
		t.Fatal(err)
	}
	return etag
}

// A failed job's clean-up: shards purged, the retry its spec asks for queued after the backoff
// (priority kept), the ended marker stored, the active marker left to the sweeper.
func TestLifecycle_CleanFailedJob(t *testing.T) {
	for _, c := range []struct {
		name      string
		retries   int
		wantRetry bool
	}{
		{"no retries", 0, false},
		{"retries left", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMemTerm(3, func(cfg *Config) { cfg.RetryBackoff = 5 * time.Second })
			ctx := context.Background()
			m.putSpec(t, protocol.Spec{ID: memJob, Type: "sleep", Retries: c.retries, Priority: 5})
			now := m.clock.now()
			cp := protocol.Checkpoint{Job: memJob, Type: "sleep", State: jobs.StateFailed, Error: "boom", UpdatedAt: now, FinishedAt: &now}
			if swept := m.life.Clean(ctx, &cp, lifecycle.Ended{Sweep: true}); !swept {
				t.Fatal("the active marker did not go to the sweeper")
			}
			if !slices.Equal(m.b.purged, []string{memJob}) {
				t.Fatalf("purged %v, want the job's shards", m.b.purged)
			}
			if got := m.st.names(protocol.EndedPrefix); !slices.Equal(got, []string{protocol.EndedBlob(memJob, jobs.StateFailed, now)}) {
				t.Fatalf("ended markers %v", got)
			}
			next, _ := protocol.RetryJobID(memJob)
			visible, queued := m.q.queued()[next]
			if queued != c.wantRetry {
				t.Fatalf("retry queued %v, want %v", queued, c.wantRetry)
			}
			if !c.wantRetry {
				return
			}
			if want := now.Add(5 * time.Second); !visible.Equal(want) {
				t.Fatalf("retry visible at %v, want after the backoff (%v)", visible, want)
			}
			data, _, err := m.st.Get(ctx, protocol.SpecBlob(next))
			if err != nil {
				t.Fatal(err)
			}
			rs, err := protocol.ParseSpec(data)
			if err != nil || rs.Retries != c.retries-1 || rs.RetryOf != memJob || rs.Priority != 5 {
				t.Fatalf("retry spec %+v (%v): want retries %d, retry_of %s, priority 5", rs, err, c.retries-1, memJob)
			}
			// A clean-up run again (a new leader's) queues nothing twice.
			m.life.Clean(ctx, &cp, lifecycle.Ended{})
			if n := len(m.q.queued()); n != 1 {
				t.Fatalf("%d messages after a second clean-up, want 1", n)
			}
		})
	}
}

// A clean-up after storage trouble that finds the final checkpoint the term wrote gone (the
// store lost its recent writes) keeps the job's active marker, written again, so that a rescan
// claims the job from what is stored; with the checkpoint still the one written, the marker goes
// to the sweeper as before. Before, the job stayed "running" in storage with nobody holding it
// (chaos schedule-blob-kill: STUCK, 2 runs in 6).
func TestLifecycle_CleanAfterRollbackKeepsTheMarker(t *testing.T) {
	m := newMemTerm(3, func(*Config) {})
	ctx := context.Background()
	cp, etag := m.failedJob(t)
	troubled := store.TransientFailures() + 1 // not the count now: the store was in trouble since
	if swept := m.life.Clean(ctx, &cp, lifecycle.Ended{ETag: etag, Sweep: true, Troubles: troubled}); !swept {
		t.Fatal("the checkpoint is still the one written, but the marker did not go to the sweeper")
	}
	if err := m.st.Delete(ctx, protocol.CheckpointBlob(memJob)); err != nil {
		t.Fatal(err)
	}
	if swept := m.life.Clean(ctx, &cp, lifecycle.Ended{ETag: etag, Sweep: true, Troubles: troubled}); swept {
		t.Fatal("the final checkpoint is gone, but the marker went to the sweeper")
	}
	if ok, err := m.st.Exists(ctx, protocol.ActiveBlob(memJob)); err != nil || !ok {
		t.Fatalf("the active marker of a job whose final checkpoint was lost: exists %v, err %v", ok, err)
	}
}

// The store's trouble begins while the marker's delete waits (an emulator killed as the
// clean-up deletes, which loses the final checkpoint written just before and takes the delete
// once it is back): the marker is written again, at once or by the sweeper, so the job is
// claimed again. Before, the check ran only before the delete: the job stayed "running" in
// storage with nobody holding it (the schedule-blob-kill chaos fault, STUCK).
func TestLifecycle_RollbackDuringTheMarkerDelete(t *testing.T) {
	for _, sweep := range []bool{false, true} {
		t.Run(fmt.Sprintf("sweep=%v", sweep), func(t *testing.T) {
			m := newMemTerm(3, func(*Config) {})
			ctx := context.Background()
			cp, etag := m.failedJob(t)
			if _, err := m.st.Put(ctx, protocol.ActiveBlob(memJob), nil, store.Cond{}); err != nil {
				t.Fatal(err)
			}
			m.st.onDelete = func(name string) {
				if name == protocol.ActiveBlob(memJob) {
					storageTrouble(t)
					m.st.onDelete = nil
					if err := m.st.Delete(ctx, protocol.CheckpointBlob(memJob)); err != nil {
						t.Error(err)
					}
				}
			}
			here := lifecycle.Ended{ETag: etag, Sweep: sweep, Troubles: store.TransientFailures()}
			if swept := m.life.Clean(ctx, &cp, here); swept {
				m.life.Sweep.Flush(ctx)
			}
			if ok, err := m.st.Exists(ctx, protocol.ActiveBlob(memJob)); err != nil || !ok {
				t.Fatalf("the active marker of a job whose final checkpoint was lost during its delete: exists %v, err %v", ok, err)
			}
		})
	}
}

// failedJob stores memJob's spec and a failed final checkpoint, and returns the checkpoint and
// its ETag: a job the term ended.
func (m *memTerm) failedJob(t *testing.T) (protocol.Checkpoint, store.ETag) {
	t.Helper()
	m.putSpec(t, protocol.Spec{ID: memJob, Type: "sleep"})
	now := m.clock.now()
	cp := protocol.Checkpoint{Job: memJob, Type: "sleep", State: jobs.StateFailed, Error: "boom", UpdatedAt: now, FinishedAt: &now}
	return cp, m.putCheckpoint(t, cp)
}

// Retention deletes a job once its state's retention has passed, and a job a newer term wrote
// ends the term.
func TestLifecycle_ExpireRules(t *testing.T) {
	for _, c := range []struct {
		name        string
		state       jobs.State
		writer      uint64
		age         time.Duration
		wantDeleted bool
		wantErr     error
	}{
		{"succeeded, expired", jobs.StateSucceeded, 2, 2 * time.Hour, true, nil},
		{"succeeded, kept", jobs.StateSucceeded, 2, 30 * time.Minute, false, nil},
		{"failed, kept longer", jobs.StateFailed, 2, 2 * time.Hour, false, nil},
		{"written by a newer term", jobs.StateSucceeded, 4, 2 * time.Hour, false, ErrDeposed},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMemTerm(3, func(cfg *Config) { cfg.RetainSucceeded, cfg.RetainFailed = time.Hour, 24*time.Hour })
			ctx := context.Background()
			m.putSpec(t, protocol.Spec{ID: memJob, Type: "sleep"})
			ended := m.clock.now().Add(-c.age)
			m.putCheckpoint(t, protocol.Checkpoint{Job: memJob, State: c.state, WriterEpoch: c.writer, FinishedAt: &ended})
			if err := m.life.MarkEnded(ctx, &protocol.Checkpoint{Job: memJob, State: c.state, FinishedAt: &ended}); err != nil {
				t.Fatal(err)
			}
			err := m.life.Expire(ctx)
			if !errors.Is(err, c.wantErr) {
				t.Fatalf("expire: %v, want %v", err, c.wantErr)
			}
			left := m.st.names(memJob + "/")
			if deleted := len(left) == 0; deleted != c.wantDeleted {
				t.Fatalf("deleted %v (left %v), want %v", deleted, left, c.wantDeleted)
			}
		})
	}
}

// The fence: a conditional write's conflict is explained by who wrote the checkpoint.
func TestFence_Conflict(t *testing.T) {
	for _, c := range []struct {
		name   string
		epoch  uint64
		term   string // "" : another term's id
		want   error
		wantHi uint64
	}{
		{"an older epoch wrote late: re-read", 2, "", core.ErrRetryClaim, 2},
		{"a newer epoch: deposed", 4, "", ErrDeposed, 4},
		{"this epoch, another term: deposed", 3, "other", ErrDeposed, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newMemTerm(3, nil)
			m.putCheckpoint(t, protocol.Checkpoint{Job: memJob, State: jobs.StateRunning, WriterEpoch: c.epoch, WriterTerm: c.term})
			if err := m.fence.Conflict(context.Background(), memJob); !errors.Is(err, c.want) {
				t.Fatalf("conflict: %v, want %v", err, c.want)
			}
			if got := m.c.HighestEpochSeen(); got != c.wantHi {
				t.Fatalf("highest epoch seen %d, want %d", got, c.wantHi)
			}
		})
	}
}

// A marked job without a checkpoint goes back on the queue once, after two rescan intervals.
func TestIntake_RequeueMarkedJobWithoutCheckpoint(t *testing.T) {
	m := newMemTerm(1, func(cfg *Config) { cfg.RescanInterval = time.Second })
	ctx := context.Background()
	m.putSpec(t, protocol.Spec{ID: memJob, Type: "sleep"})
	m.in.requeue(ctx, memJob)
	if len(m.q.queued()) != 0 {
		t.Fatal("queued at first sight")
	}
	m.clock.add(time.Second)
	m.in.requeue(ctx, memJob)
	if len(m.q.queued()) != 0 {
		t.Fatal("queued after one rescan interval")
	}
	m.clock.add(time.Second)
	m.in.requeue(ctx, memJob)
	m.in.requeue(ctx, memJob)
	if q := m.q.queued(); len(q) != 1 {
		t.Fatalf("queue %v, want the job once", q)
	}
}
