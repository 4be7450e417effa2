package coordinator

import (
	"context"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/store"
)

// stuckBacklog is a bus whose stream-state reads hang until their context ends (NATS slow).
type stuckBacklog struct {
	Bus
	calls chan string
}

func (b *stuckBacklog) JobBacklog(ctx context.Context, job string) (uint64, uint64, error) {
	select {
	case b.calls <- job:
	default:
	}
	<-ctx.Done()
	return 0, 0, ctx.Err()
}

// Self-repair reads the streams off the main loop: while those reads hang, the loop turns on
// (the leader stays healthy and keeps its lease).
func TestRepair_StreamReadsOffTheLoop(t *testing.T) {
	r := newRig(t)
	b := &stuckBacklog{Bus: connect(t, r.url), calls: make(chan string, 1)}
	cfg := Config{Registry: builtin.Registry(), Logger: quietLog(), CheckpointInterval: 50 * time.Millisecond,
		QueuePoll: 100 * time.Millisecond, RepairInterval: 20 * time.Millisecond, StallTimeout: 300 * time.Millisecond}
	c, err := New(cfg, r.st, r.q, b, store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Lead(ctx, 1) }()
	defer func() { cancel(); <-done }()
	r.submit("sleep", `{"shards":4,"duration":"1ms"}`) // no worker: dispatched, never merged
	select {
	case <-b.calls:
	case <-time.After(20 * time.Second):
		t.Fatal("self-repair never read the streams")
	}
	// Each read hangs 2 s; the loop must turn meanwhile.
	end := time.Now().Add(time.Second)
	for time.Now().Before(end) {
		if err := c.Healthy(); err != nil {
			t.Fatalf("main loop stalled while self-repair read the streams: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
