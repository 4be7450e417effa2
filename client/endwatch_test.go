package client_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// endRig is a client with its end watch on (NATS), the storage under it, and announce, which
// publishes the leader's job_finished event for a job as a leader does.
func endRig(t *testing.T, prefix string) (*client.Client, *env, func(job string)) {
	t.Helper()
	conn := testenv.Azurite(t)
	url := testenv.NATS(t)
	cfg := client.Config{Storage: store.Account{ConnectionString: conn}, JobsContainer: testenv.Name(t, "jobs"), Queue: testenv.Name(t, "q"),
		Registry: builtin.Registry(), NATSURL: url, StreamPrefix: prefix}
	e := newEnvNamed(t, conn, cfg.JobsContainer, cfg.Queue)
	cl, err := client.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	announce := func(job string) {
		t.Helper()
		ev := membership.Event{Seq: 1, At: time.Now(), Worker: "w1", Kind: string(coordinator.EventJobFinished), Job: job, State: string(jobs.StateSucceeded)}
		data, err := ev.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(protocol.NewNames(prefix).Events(), data); err != nil {
			t.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	return cl, e, announce
}

// Wait learns of a job's end from the leader's job_finished event, not at its next poll; an
// event is only a hint: one that names the job before its status says it ended, or names
// another job, does not end the wait.
func TestWait_WokenByTheJobFinishedEvent(t *testing.T) {
	ctx := context.Background()
	cl, e, announce := endRig(t, "endwatch")
	id, err := cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":10,"shards":1}`))
	if err != nil {
		t.Fatal(err)
	}

	type waited struct {
		st  *client.Status
		err error
	}
	done := make(chan waited, 1)
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		st, err := cl.Wait(wctx, id, time.Hour, nil) // polls once, then only an event wakes it
		done <- waited{st, err}
	}()
	time.Sleep(500 * time.Millisecond) // the first status read is done and the watch is on

	announce("20260101-000000-00000000") // another job
	announce(id)                         // this job, but its status still says queued
	select {
	case w := <-done:
		t.Fatalf("Wait returned on an event its status does not bear out: %+v, %v", w.st, w.err)
	case <-time.After(time.Second):
	}

	e.putCheckpoint(t, id, jobs.StateSucceeded, 1, 1, `{"count":4}`, "")
	announce(id)
	select {
	case w := <-done:
		if w.err != nil || w.st.State != jobs.StateSucceeded {
			t.Fatalf("Wait = %+v, %v; want succeeded", w.st, w.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Wait did not wake on the job_finished event (it polls every hour)")
	}
}

// countingStore counts the reads of the jobs container.
type countingStore struct {
	*store.Container
	mu    sync.Mutex
	reads []string
}

func (s *countingStore) read(op string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads = append(s.reads, op)
}

func (s *countingStore) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.reads
	s.reads = nil
	return r
}

func (s *countingStore) Get(ctx context.Context, name string) ([]byte, store.ETag, error) {
	s.read("get " + name)
	return s.Container.Get(ctx, name)
}

func (s *countingStore) Props(ctx context.Context, name string) (store.Props, error) {
	s.read("props " + name)
	return s.Container.Props(ctx, name)
}

func (s *countingStore) GetHead(ctx context.Context, name string, limit int64) ([]byte, store.Props, error) {
	s.read("head " + name)
	return s.Container.GetHead(ctx, name, limit)
}

// Woken by a job's end event, Wait reads its status and result in one request when the final
// checkpoint is small, in two when it is not; the result is the checkpoint's either way.
func TestWait_OneReadAfterTheEndEvent(t *testing.T) {
	ctx := context.Background()
	cl, e, announce := endRig(t, "endread")
	cs := &countingStore{Container: cl.Store.(*store.Container)}
	cl.Store = cs
	big := `{"s":"` + strings.Repeat("x", 100<<10) + `"}`
	for _, c := range []struct {
		result string
		reads  int
	}{{`{"count":4}`, 1}, {big, 2}} {
		id, err := cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":10,"shards":1}`))
		if err != nil {
			t.Fatal(err)
		}
		specData, _, err := e.jobs.Get(ctx, protocol.SpecBlob(id))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := protocol.ParseSpec(specData)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *client.Status, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			st, err := cl.Wait(wctx, id, time.Hour, nil) // polls once, then only an event wakes it
			if err != nil {
				t.Error(err)
			}
			done <- st
		}()
		time.Sleep(500 * time.Millisecond) // the first status read is done and the watch is on
		now := time.Now().UTC()
		cp := protocol.Checkpoint{Version: protocol.CheckpointVersion, Job: id, Type: "primes", State: jobs.StateSucceeded, PlanEpoch: 1, WriterEpoch: 1,
			Total: 1, DoneCount: 1, Dispatched: 1, Result: json.RawMessage(c.result), UpdatedAt: now, FinishedAt: &now}
		data, err := cp.Encode()
		if err != nil {
			t.Fatal(err)
		}
		md, err := protocol.NewStatusRecord(&cp, spec).Metadata()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.jobs.PutMeta(ctx, protocol.CheckpointBlob(id), data, md, store.Cond{}); err != nil {
			t.Fatal(err)
		}
		cs.take()
		announce(id)
		var st *client.Status
		select {
		case st = <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("Wait did not wake on the job_finished event")
		}
		if st == nil || st.State != jobs.StateSucceeded || string(st.Result) != c.result || !st.SubmittedAt.Equal(spec.SubmittedAt) {
			t.Fatalf("Wait = %+v", st)
		}
		if r := cs.take(); len(r) != c.reads {
			t.Errorf("result of %d bytes: reads after the event %v, want %d", len(c.result), r, c.reads)
		}
	}
}
