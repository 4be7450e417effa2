package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// waitDone waits until the job's stored checkpoint counts n shards done.
func (r *rig) waitDone(id string, n int) {
	r.t.Helper()
	testenv.Eventually(r.t, 20*time.Second, 20*time.Millisecond, func() bool {
		st, err := r.cl.Status(context.Background(), id)
		return err == nil && st.ShardsDone == n
	}, "shards not checkpointed")
}

// The scenario: a job's checkpoint goes back in time (storage lost acknowledged writes)
// after the results it covered were acknowledged, and the shards a worker took are gone too. The
// next leader resumes from the old checkpoint, finds the missing shards nowhere, dispatches them
// again, and the job finishes exact without anyone touching it.
func TestRepair_CheckpointRollbackFinishesExact(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	a := r.leadWith(1, func(c *Config) { c.RepairInterval = time.Hour })
	id := r.submit("sleep", `{"shards":6}`)
	shards := r.shardsOf(6) // taken and acknowledged, as a worker would
	r.result(shards[0], 1, 1, nil)
	r.result(shards[1], 1, 1, nil)
	r.waitDone(id, 2)
	old, _, err := r.st.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		t.Fatal(err)
	}
	r.result(shards[2], 1, 1, nil)
	r.result(shards[3], 1, 1, nil)
	r.waitDone(id, 4)
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		s, res, err := r.b.JobBacklog(ctx, id)
		return err == nil && s == 0 && res == 0
	}, "results not acknowledged")
	if err := a.stop(); err != nil {
		t.Fatal(err)
	}
	// The rollback: the checkpoint of two shards done is back; shards 2-5 are nowhere.
	if _, err := r.st.Put(ctx, protocol.CheckpointBlob(id), old, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	var repaired atomic.Int64
	r.work(worker.Config{Concurrency: 2})
	r.leadWith(2, func(c *Config) {
		c.RepairInterval = 100 * time.Millisecond
		c.OnEvent = func(ev Event) {
			if ev.Kind == EventRepaired && ev.Job == id {
				repaired.Add(int64(ev.Count))
			}
		}
	})
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":6,"index_sum":15}`))
	if n := repaired.Load(); n != 4 {
		t.Fatalf("repaired %d shards, want the 4 missing", n)
	}
}

// Shards purged from the shards stream while the job runs are dispatched again.
func TestRepair_PurgedShardsRepaired(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.leadWith(1, func(c *Config) { c.RepairInterval = 100 * time.Millisecond })
	r.work(worker.Config{Concurrency: 1})
	params := `{"shards":60,"duration":"20ms"}`
	id := r.submit("sleep", params)
	testenv.Eventually(t, 20*time.Second, 10*time.Millisecond, func() bool {
		st, err := r.cl.Status(ctx, id)
		return err == nil && st.ShardsDone >= 3
	}, "job did not start")
	if err := r.b.PurgeJob(ctx, id); err != nil {
		t.Fatal(err)
	}
	st := r.wait(id, time.Minute)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, sequential(t, nil, "sleep", params))
}

// A job whose missing shards cannot be brought back (here: its stored plan is gone) fails after
// RepairRounds rounds, naming them, instead of running forever.
func TestRepair_GivesUpNamingTheShards(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	params := fmt.Sprintf(`{"container":%q,"prefix":"in/","top":5,"shard_bytes":1048576}`, r.wordcountInput())
	r.leadWith(4, func(c *Config) { c.RepairInterval = 50 * time.Millisecond; c.RepairRounds = 2 })
	id := r.submit("wordcount", params)
	r.shardsOf(3) // one shard per input blob, taken and lost
	for _, p := range r.storedPlan(id) {
		if err := r.st.Delete(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateFailed || !strings.Contains(st.Error, "shards 0, 1, 2") || !strings.Contains(st.Error, "self-repair") {
		t.Fatalf("state %s, error %q: want failed naming shards 0-2", st.State, st.Error)
	}
}

func TestShardList(t *testing.T) {
	set := roaring.BitmapOf(3)
	if got := shardList(set); got != "shard 3" {
		t.Fatal(got)
	}
	set = roaring.BitmapOf(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	if got := shardList(set); got != "shards 0, 1, 2, 3, 4, 5, 6, 7 and 3 more" {
		t.Fatal(got)
	}
}

// deadLetter returns the last dead letter from source and its reason.
func (r *rig) deadLetter(source string) (data []byte, reason string) {
	r.t.Helper()
	data, reason, err := r.lastDead(source)
	if err != nil {
		r.t.Fatalf("no dead letter from %s: %v", source, err)
	}
	return data, reason
}

func (r *rig) lastDead(source string) (data []byte, reason string, err error) {
	r.t.Helper()
	js, err := jetstream.New(r.b.Conn())
	if err != nil {
		r.t.Fatal(err)
	}
	names := protocol.NewNames(r.b.Config().Prefix)
	s, err := js.Stream(context.Background(), names.DeadStream())
	if err != nil {
		r.t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(context.Background(), names.DeadSubject(source))
	if err != nil {
		return nil, "", err
	}
	return m.Data, m.Header.Get("Reason"), nil
}

// A well-formed result with a garbage partial is dead-lettered with its reason; the job goes on
// and its answer is exact (the shard's real result completes it).
func TestRepair_MalformedPartialDeadLetteredJobExact(t *testing.T) {
	r := newRig(t)
	r.lead(1)
	id := r.submit("sleep", `{"shards":3}`)
	shards := r.shardsOf(3)
	r.result(shards[1], 1, 1, func(m *protocol.ResultMsg) { m.Partial = []byte("garbage") })
	r.result(shards[2], 1, 1, func(m *protocol.ResultMsg) { m.Index = 7 }) // outside the plan
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		_, reason, err := r.lastDead("results")
		return err == nil && strings.Contains(reason, "outside the plan")
	}, "result outside the plan not dead-lettered")
	data, reason := r.deadLetter("results")
	for _, m := range shards {
		r.result(m, 1, 2, nil)
	}
	st := r.wait(id, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("state %s: %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, json.RawMessage(`{"shards":3,"index_sum":3}`))
	if rs, err := protocol.DecodeResults(data); err != nil || rs[0].Index != 7 {
		t.Fatalf("dead letter %q: %v", data, err)
	}
	if !strings.Contains(reason, "shard 7") {
		t.Fatalf("reason %q does not name the shard", reason)
	}
	js, _ := jetstream.New(r.b.Conn())
	names := protocol.NewNames(r.b.Config().Prefix)
	s, _ := js.Stream(context.Background(), names.DeadStream())
	found := false
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			break
		}
		if rs, err := protocol.DecodeResults(m.Data); err == nil && rs[0].Job == id && string(rs[0].Partial) == "garbage" {
			found = strings.Contains(m.Header.Get("Reason"), "shard 1") && strings.Contains(m.Header.Get("Reason"), "cannot be merged")
			if !found {
				t.Fatalf("garbage partial dead-lettered with reason %q", m.Header.Get("Reason"))
			}
		}
	}
	if !found {
		t.Fatal("the garbage partial is not in the dead-letter stream")
	}
}

// syncBuffer is a log sink for a test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A 60 KB queue message is dead-lettered whole, but neither its dead letter's reason nor the
// ERROR log line copies it: both cut it, with its size.
func TestIntake_HugeQueueMessageClipped(t *testing.T) {
	r := newRig(t)
	var logs syncBuffer
	r.leadWith(1, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	huge := strings.Repeat("z", 60*1024)
	if err := r.q.Enqueue(context.Background(), huge); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 20*time.Second, 20*time.Millisecond, func() bool {
		_, _, err := r.lastDead("queue")
		return err == nil && strings.Contains(logs.String(), "malformed queue message")
	}, "huge queue message not refused")
	data, reason := r.deadLetter("queue")
	if string(data) != huge {
		t.Fatalf("dead letter holds %d bytes, want the message's %d", len(data), len(huge))
	}
	if len(reason) > 300 || !strings.Contains(reason, "(61440 bytes)") {
		t.Fatalf("reason of %d bytes: %.300s", len(reason), reason)
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 2048 {
			t.Fatalf("a log line of %d bytes: %.300s…", len(line), line)
		}
	}
}
