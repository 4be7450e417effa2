package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// A well-formed shard that no cluster member signed is never run: the worker executes only the
// genuine shard behind it, and the forged one is dead-lettered.
func TestWorker_ForgedShardNeverRun(t *testing.T) {
	r := newRig(t)
	var ran atomic.Int32
	w := r.start(worker.Config{}, testJob{typ: "echo", fn: func(task jobs.Task) ([]byte, error) {
		ran.Add(1)
		return task.Shard, nil
	}})
	js, err := jetstream.New(r.b.Conn())
	if err != nil {
		t.Fatal(err)
	}
	forged := protocol.ShardMsg{Kind: protocol.KindAggregate, Job: "job-f", Type: "echo", Index: 0, Epoch: 1, Shard: []byte("forged")}
	data, _ := forged.Encode()
	if _, err := js.Publish(context.Background(), r.b.ShardTypeSubject("echo", "job-f"), data, jetstream.WithMsgID(protocol.ShardMsgID("job-f", 0))); err != nil {
		t.Fatal(err)
	}
	r.dispatch("echo", "job-g", 1)
	res := r.results(1)
	if res[0].Job != "job-g" {
		t.Fatalf("result of %s", res[0].Job)
	}
	r.noneQueued()
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool { return r.b.Refused() == 1 }, "forged shard not refused") // refused means terminated: it can never run later
	if st := w.Stats(); st.Executed != 1 || ran.Load() != 1 {
		t.Fatalf("executed %d (map ran %d times), want 1: the genuine shard only", st.Executed, ran.Load())
	}
}
