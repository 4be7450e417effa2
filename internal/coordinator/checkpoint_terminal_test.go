package coordinator

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A job's final checkpoint keeps its result and drops its aggregate (an ended job is never
// resumed), so the last write, which the job's end waits for, stays small however large the
// aggregate (a wordcount's vocabulary).
func TestCheckpoint_TerminalKeepsResultNotAggregate(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.KeepResultMax = -1 }) // every result is dropped
	r.work(worker.Config{Concurrency: 2})
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","top":5,"shard_bytes":4096}`, r.wordcountInput())
	id := r.submit("wordcount", params)
	st := r.wait(id, 60*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, sequential(t, store.NewEnv(r.blob), "wordcount", params))
	data, _, err := r.st.Get(context.Background(), protocol.CheckpointBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if cp.State != jobs.StateSucceeded || len(cp.Result) == 0 && !cp.ResultStored || len(cp.Aggregate) != 0 || cp.DoneCount != cp.Total {
		t.Fatalf("final checkpoint: state %s, %d result bytes, %d aggregate bytes, %d of %d done",
			cp.State, len(cp.Result), len(cp.Aggregate), cp.DoneCount, cp.Total)
	}
	// Once the copy is stored, the result is dropped from the checkpoint: stored once (issue 19).
	eventually(t, 10*time.Second, "result dropped from the checkpoint", func() bool {
		data, _, err := r.st.Get(context.Background(), protocol.CheckpointBlob(id))
		cp, derr := protocol.DecodeCheckpoint(data)
		return err == nil && derr == nil && cp.ResultStored && len(cp.Result) == 0
	})
	res, _, err := r.st.Get(context.Background(), protocol.ResultBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, res, st.Result)
	if rec := r.record(id); rec.State != jobs.StateSucceeded || rec.Seq != cp.Seq {
		t.Fatalf("status record after the rewrite: %+v", rec)
	}
	if got, err := r.cl.Result(context.Background(), id); err != nil {
		t.Fatal(err)
	} else {
		sameJSON(t, got, st.Result)
	}
}

// A small result (a one-shard job's) stays in the final checkpoint and gets no copy: the copy is
// one more storage write on every tiny job's path. Every reader still finds it: the client, and
// workers checking whether the job ended (the checkpoint's status record).
func TestCheckpoint_SmallResultInTheCheckpointOnly(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	r.work(worker.Config{Concurrency: 1})
	id := r.submit("pi", `{"samples":1000,"shards":1}`)
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	ctx := context.Background()
	eventually(t, 10*time.Second, "clean-up done (the active marker deleted, after the rewrite's place)", func() bool {
		ok, err := r.st.Exists(ctx, protocol.ActiveBlob(id))
		return err == nil && !ok
	})
	data, _, err := r.st.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		t.Fatal(err)
	}
	if cp.ResultStored || len(cp.Result) == 0 {
		t.Fatalf("final checkpoint rewritten: result stored %v, %d result bytes", cp.ResultStored, len(cp.Result))
	}
	if _, _, err := r.st.Get(ctx, protocol.ResultBlob(id)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("result copy: %v, want none", err)
	}
	if rec := r.record(id); rec.State != jobs.StateSucceeded {
		t.Fatalf("status record %+v: the workers' ended check reads it", rec)
	}
	if got, err := r.cl.Result(ctx, id); err != nil {
		t.Fatal(err)
	} else {
		sameJSON(t, got, cp.Result)
	}
}
