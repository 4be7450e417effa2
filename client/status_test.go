package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/jobstore"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// submitAt submits a pi job at the client's clock.
func (e *env) submitPi(t testing.TB) string {
	t.Helper()
	id, err := e.cl.Submit(context.Background(), "pi", json.RawMessage(`{"samples":1000,"shards":2}`))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func tick(e *env) {
	clock := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	e.cl.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
}

// Status reads the record, never the checkpoint's content: a checkpoint whose content is not a
// checkpoint at all, under a valid record, shows as the record says.
func TestClient_Status_ReadsOnlyTheRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	id := e.submitPi(t)
	fin := time.Now().UTC()
	cp := protocol.Checkpoint{Job: id, Type: "pi", State: jobs.StateFailed, Total: 2, DoneCount: 1, WriterEpoch: 4, PlanEpoch: 3,
		Error: "shard 1: boom", FinishedAt: &fin}
	md, err := protocol.NewStatusRecord(&cp, nil).Metadata()
	if err != nil {
		t.Fatal(err)
	}
	junk := bytes.Repeat([]byte{0xff}, 1<<20)
	if _, err := e.jobs.PutMeta(ctx, protocol.CheckpointBlob(id), junk, md, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.cl.Status(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != jobs.StateFailed || st.Error != "shard 1: boom" || st.ShardsDone != 1 || st.Epoch != 4 || st.FinishedAt == nil ||
		st.SubmittedAt.IsZero() || st.Type != "pi" {
		t.Fatalf("Status = %+v", st)
	}
	if _, err := e.cl.Result(ctx, id); err == nil || !strings.Contains(err.Error(), "failed: shard 1: boom") {
		t.Fatalf("Result of a failed job = %v", err)
	}
}

// Checkpoints of an earlier build have no record: a small one is read once to show its job; a
// large one is shown as unknown with a note, never downloaded.
func TestClient_Status_EarlierBuildCheckpoints(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tick(e)
	small, large := e.submitPi(t), e.submitPi(t)
	cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: small, Type: "pi", State: jobs.StateSucceeded, PlanEpoch: 1,
		WriterEpoch: 1, Total: 2, DoneCount: 2, Dispatched: 2, Result: json.RawMessage(`{"pi":3.1}`)}
	data, _ := cp.Encode()
	if _, err := e.jobs.Put(ctx, protocol.CheckpointBlob(small), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	cp.Job, cp.Result = large, json.RawMessage(`"`+strings.Repeat("x", jobstore.LegacyCheckpointLimit)+`"`)
	data, _ = cp.Encode()
	if _, err := e.jobs.Put(ctx, protocol.CheckpointBlob(large), data, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.cl.Status(ctx, small)
	if err != nil || st.State != jobs.StateSucceeded || st.ShardsDone != 2 || !strings.Contains(st.Note, "older version") {
		t.Fatalf("small legacy job: %+v, %v", st, err)
	}
	if res, err := e.cl.Result(ctx, small); err != nil || string(res) != `{"pi":3.1}` {
		t.Fatalf("Result of a small legacy job = %s, %v", res, err)
	}
	st, err = e.cl.Status(ctx, large)
	if err != nil || st.State != client.StateUnknown || !strings.Contains(st.Note, "older version") || st.Type != "pi" {
		t.Fatalf("large legacy job: %+v, %v", st, err)
	}
}

// A malformed record makes its job unreadable in the list, with the reason; the others show.
func TestClient_List_BadRecordShownAsUnreadable(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tick(e)
	bad, good := e.submitPi(t), e.submitPi(t)
	if _, err := e.jobs.PutMeta(ctx, protocol.CheckpointBlob(bad), []byte("x"), map[string]string{protocol.StatusMetaKey: "bm90IGpzb24"}, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	e.putCheckpoint(t, good, jobs.StateRunning, 1, 2, "", "")
	list, err := e.cl.List(ctx, 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if list[0].ID != bad || list[0].State != client.StateUnreadable || !strings.Contains(list[0].Unreadable, "bad status record") {
		t.Errorf("bad job: %+v", list[0])
	}
	if list[1].State != jobs.StateRunning || list[1].ShardsDone != 1 {
		t.Errorf("good job: %+v", list[1])
	}
}

// List gives running jobs their share of their type's dispatch (by priority weight) and queued
// jobs their place.
func TestClient_List_SharesAndPositions(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tick(e)
	var ids []string
	for _, p := range []int{0, 1, 0, 0, 3} {
		id, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`), client.WithPriority(p))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	for _, id := range ids[:2] {
		st, _ := e.cl.Status(ctx, id)
		cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "pi", State: jobs.StateRunning, PlanEpoch: 1, WriterEpoch: 1, Total: 2, Dispatched: 2}
		data, _ := cp.Encode()
		md, _ := protocol.NewStatusRecord(&cp, &protocol.Spec{ID: id, Type: "pi", Priority: st.Priority, SubmittedAt: st.SubmittedAt}).Metadata()
		if _, err := e.jobs.PutMeta(ctx, protocol.CheckpointBlob(id), data, md, store.Cond{}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := e.cl.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, s := range list {
		got += fmt.Sprintf("%s p%d share %.2f pos %d; ", s.State, s.Priority, s.Share, s.Position)
	}
	want := "running p0 share 0.33 pos 0; running p1 share 0.67 pos 0; queued p0 share 0.00 pos 1; queued p0 share 0.00 pos 2; queued p3 share 0.00 pos 3; "
	if got != want {
		t.Fatalf("List:\n got %s\nwant %s", got, want)
	}
	if _, err := e.cl.Submit(ctx, "pi", json.RawMessage(`{"samples":1000,"shards":2}`), client.WithPriority(11)); err == nil || !strings.Contains(err.Error(), "priority 11") {
		t.Fatalf("priority 11: %v", err)
	}
}

// BenchmarkClient_List_TenBigJobs: `worker status` over ten jobs whose checkpoints are 100 MB
// each (terminal checkpoints carrying a 100 MB result) and ten result copies as large. Run with
//
//	go test -run '^$' -bench TenBigJobs -benchtime 20x ./client/
func BenchmarkClient_List_TenBigJobs(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	tick(e)
	big := json.RawMessage(`"` + strings.Repeat("x", 100<<20) + `"`)
	for i := 0; i < 10; i++ {
		id := e.submitPi(b)
		fin := time.Now().UTC()
		cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "pi", State: jobs.StateSucceeded, PlanEpoch: 1,
			WriterEpoch: 1, Total: 2, DoneCount: 2, Dispatched: 2, Result: big, FinishedAt: &fin}
		data, err := cp.Encode()
		if err != nil {
			b.Fatal(err)
		}
		md, _ := protocol.NewStatusRecord(&cp, nil).Metadata()
		if _, err := e.jobs.PutMeta(ctx, protocol.CheckpointBlob(id), data, md, store.Cond{}); err != nil {
			b.Fatal(err)
		}
		if _, err := e.jobs.Put(ctx, protocol.ResultBlob(id), big, store.Cond{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		list, err := e.cl.List(ctx, 50)
		if err != nil || len(list) != 10 || list[0].State != jobs.StateSucceeded {
			b.Fatalf("List = %d jobs, %v", len(list), err)
		}
	}
}

// hangingProps is storage whose HEAD of one blob hangs until its context ends: a slow storage
// call the real server cannot make on demand.
type hangingProps struct {
	*store.Container
	name string
}

func (h hangingProps) Props(ctx context.Context, name string) (store.Props, error) {
	if name == h.name {
		<-ctx.Done()
		return store.Props{}, ctx.Err()
	}
	return h.Container.Props(ctx, name)
}

// One job whose status read hangs is listed as unreadable with the reason; the list still comes.
func TestClient_List_SlowJobDoesNotFailTheList(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	tick(e)
	slow, fine := e.submitPi(t), e.submitPi(t)
	cl := *e.cl
	cl.Store = hangingProps{Container: e.jobs, name: protocol.CheckpointBlob(slow)}
	list, err := cl.List(ctx, 0)
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %+v, %v", list, err)
	}
	if list[0].ID != slow || list[0].State != client.StateUnreadable || !strings.Contains(list[0].Unreadable, "deadline exceeded") {
		t.Errorf("slow job: %+v", list[0])
	}
	if list[1].ID != fine || list[1].State != jobs.StateQueued {
		t.Errorf("other job: %+v", list[1])
	}
}
