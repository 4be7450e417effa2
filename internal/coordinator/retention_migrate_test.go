package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// oldJob writes a job as an earlier build left it: its spec and an ended checkpoint, no ended
// marker, no active marker. legacy: a checkpoint without a status record.
func (r *rig) oldJob(id string, state jobs.State, finished time.Time, legacy bool) {
	r.t.Helper()
	ctx := context.Background()
	spec := protocol.Spec{ID: id, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), SubmittedAt: finished.Add(-time.Minute)}
	data, err := spec.Encode()
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, protocol.SpecBlob(id), data, store.Cond{}); err != nil {
		r.t.Fatal(err)
	}
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "sleep", State: state, PlanEpoch: 1, WriterEpoch: 1,
		Total: 1, Seq: 3, StartedAt: finished.Add(-time.Minute), UpdatedAt: finished, FinishedAt: &finished}
	if state == jobs.StateSucceeded {
		cp.DoneCount, cp.Dispatched, cp.Result = 1, 1, json.RawMessage(`{"shards":1,"index_sum":0}`)
	}
	if data, err = cp.Encode(); err != nil {
		r.t.Fatal(err)
	}
	meta := map[string]string{}
	if !legacy {
		if meta, err = protocol.NewStatusRecord(&cp, &spec).Metadata(); err != nil {
			r.t.Fatal(err)
		}
	}
	if _, err := r.st.PutMeta(ctx, protocol.CheckpointBlob(id), data, meta, store.Cond{}); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rig) migration() lifecycle.Migration {
	r.t.Helper()
	data, _, err := r.st.Get(context.Background(), lifecycle.MigrationBlob)
	if err != nil {
		r.t.Fatal(err)
	}
	var m lifecycle.Migration
	if err := json.Unmarshal(data, &m); err != nil {
		r.t.Fatal(err)
	}
	return m
}

// Jobs an earlier build finished (no ended marker; some without a status record) are found by
// the leader's one-time scan and expired by retention; a queued job and a folder of input data
// are left alone; the scan records that it is done and is not run again.
func TestRetention_MigratesJobsOfEarlierBuilds(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	var ids []string
	for i := range 7 {
		id := fmt.Sprintf("20261101-0000%02d-old%d", i, i)
		state := []jobs.State{jobs.StateSucceeded, jobs.StateFailed, jobs.StateCancelled}[i%3]
		r.oldJob(id, state, old, i == 4)
		ids = append(ids, id)
	}
	queued := "20261101-000100-queued"
	spec := protocol.Spec{ID: queued, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), SubmittedAt: old}
	data, _ := spec.Encode()
	if _, err := r.st.Put(ctx, protocol.SpecBlob(queued), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, "input/part-0", []byte("words"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	l := r.leadWith(2, func(c *Config) {
		c.RetainSucceeded, c.RetainFailed = time.Hour, time.Hour
		c.RetentionInterval, c.RetentionBatch = 100*time.Millisecond, 3 // three batches of jobs
	})
	eventually(t, 30*time.Second, "every old job expired", func() bool {
		for _, id := range ids {
			if ok, _ := r.st.Exists(ctx, protocol.SpecBlob(id)); ok {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		if left := r.blobsOf(id); len(left) > 0 {
			t.Fatalf("expired job %s left %v", id, left)
		}
	}
	if st, err := r.cl.Status(ctx, queued); err != nil || st.State != jobs.StateQueued {
		t.Fatalf("the queued job: %+v %v", st, err)
	}
	if ok, _ := r.st.Exists(ctx, "input/part-0"); !ok {
		t.Fatal("the lifecycle.Migration touched input data")
	}
	m := r.migration()
	if !m.Done || m.Marked != len(ids) || m.Epoch != 2 {
		t.Fatalf("lifecycle.Migration = %+v; want done, %d marked, by epoch 2", m, len(ids))
	}
	l.stop()

	// Done is done: a later term does not scan again (a job left without a marker now stays).
	late := "20261101-000200-late"
	r.oldJob(late, jobs.StateSucceeded, old, false)
	r.leadWith(3, func(c *Config) {
		c.RetainSucceeded, c.RetainFailed = time.Hour, time.Hour
		c.RetentionInterval, c.RetentionBatch = 100*time.Millisecond, 3
	})
	time.Sleep(time.Second) // the bound is the behaviour: nothing happens in it
	if _, err := r.cl.Status(ctx, late); err != nil {
		t.Fatalf("a done lifecycle.Migration ran again: %v", err)
	}
}

// The scan resumes where a dead leader's stopped: jobs up to its progress are not looked at
// again, the others are.
func TestRetention_MigrationResumes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	old := time.Now().Add(-48 * time.Hour).UTC().Truncate(time.Second)
	var ids []string
	for i := range 4 {
		id := fmt.Sprintf("20261101-0000%02d-old%d", i, i)
		r.oldJob(id, jobs.StateSucceeded, old, false)
		ids = append(ids, id)
	}
	data, _ := json.Marshal(lifecycle.Migration{After: ids[1], Epoch: 1, Marked: 2})
	if _, err := r.st.Put(ctx, lifecycle.MigrationBlob, data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	r.leadWith(3, func(c *Config) {
		c.RetainSucceeded, c.RetainFailed = time.Hour, time.Hour
		c.RetentionInterval, c.RetentionBatch = 100*time.Millisecond, 1
	})
	eventually(t, 30*time.Second, "the jobs after the progress expired", func() bool {
		_, e2 := r.cl.Status(ctx, ids[2])
		_, e3 := r.cl.Status(ctx, ids[3])
		return errors.Is(e2, client.ErrNoSuchJob) && errors.Is(e3, client.ErrNoSuchJob)
	})
	for _, id := range ids[:2] {
		if _, err := r.cl.Status(ctx, id); err != nil {
			t.Fatalf("job %s before the progress was looked at again: %v", id, err)
		}
	}
	if m := r.migration(); !m.Done || m.Marked != 4 || m.Epoch != 3 {
		t.Fatalf("lifecycle.Migration = %+v; want done, 4 marked, by epoch 3", m)
	}
}

// A term below the one that wrote the progress is deposed.
func TestRetention_MigrationFencedByEpoch(t *testing.T) {
	r := newRig(t)
	data, _ := json.Marshal(lifecycle.Migration{After: "20261101-000000-a", Epoch: 5})
	if _, err := r.st.Put(context.Background(), lifecycle.MigrationBlob, data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	l := r.leadWith(3, func(c *Config) { c.RetainSucceeded = time.Hour })
	select {
	case <-l.done:
		if !errors.Is(l.err, ErrDeposed) {
			t.Fatalf("term ended with %v; want ErrDeposed", l.err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("a term below the lifecycle.Migration's epoch went on leading")
	}
}
