package client_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/testoutput"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// readLog is the real store with a log of the blobs whose content was read.
type readLog struct {
	*store.Container
	mu   sync.Mutex
	gets []string
}

func (r *readLog) Get(ctx context.Context, name string) ([]byte, store.ETag, error) {
	r.mu.Lock()
	r.gets = append(r.gets, name)
	r.mu.Unlock()
	return r.Container.Get(ctx, name)
}

// Item 6 of issue 19, the reading side: List, Query and Status (what `worker status`, the
// dashboard and the API's job routes call) read metadata and specs, never a checkpoint's or a
// result's content, whatever the jobs' size; Result and WriteOutput do read them.
func TestStatusReaders_NeverReadResultsOrCheckpoints(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	keyed := "20261125-120000-0000beef"
	testoutput.Put(t, e.jobs, keyed, [][]testoutput.Record{{{`"a"`, `1`}}})
	big := "20261125-120001-000000b9"
	e.putCheckpoint(t, big, jobs.StateSucceeded, 1, 1, `{"words":"`+strings.Repeat("x", 4<<20)+`"}`, "")
	if _, err := e.jobs.Put(ctx, protocol.ResultBlob(big), []byte(`{"words":"x"}`), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	running := e.submitPi(t)
	e.putCheckpoint(t, running, jobs.StateRunning, 0, 2, "", "")
	queued := e.submitPi(t)

	rl := &readLog{Container: e.jobs}
	cl := &client.Client{Store: rl, Queue: e.queue}
	list, err := cl.List(ctx, 0)
	if err != nil || len(list) != 4 {
		t.Fatalf("List = %d jobs, %v", len(list), err)
	}
	if _, err := cl.Query(ctx, client.Filter{}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{keyed, big, running, queued} {
		if _, err := cl.Status(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range rl.gets {
		if !strings.HasSuffix(name, "/spec.json") {
			t.Errorf("a status reader read %s", name)
		}
	}
	// The readers of results do read them (the log sees reads).
	rl.gets = nil
	if _, err := cl.Result(ctx, big); err != nil || len(rl.gets) == 0 {
		t.Errorf("Result read %v, %v", rl.gets, err)
	}
}
