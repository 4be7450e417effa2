package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

func TestShardPace_PerMessage(t *testing.T) {
	var p shardPace
	p.observe("short", 100*time.Microsecond)
	p.observe("budget", 500*time.Microsecond)
	p.observe("long", 2*time.Millisecond)
	p.observe("gone", 100*time.Microsecond)
	p.observe("gone", 0)
	for _, c := range []struct {
		typ          string
		total, slots int
		want         int
	}{
		{"new", 200, 6, 1},       // never seen: one a message
		{"short", 200, 6, 4},     // 200 / (8 waves × 6 slots)
		{"short", 200, 0, 1},     // slots unknown
		{"short", 40, 6, 1},      // too few to leave each slot 8 messages
		{"short", 4000, 2, 16},   // at most 16
		{"budget", 4000, 2, 4},   // a message runs at most 2 ms
		{"long", 200, 6, 1},      // shards over 1 ms travel alone
		{"gone", 200, 6, 1},      // forgotten
		{"short", 8192, 6, 2},    // big jobs: shardsPerMsg
		{"long", 100_000, 6, 16}, // whatever their pace
	} {
		if got := p.perMsg(c.typ, c.total, c.slots); got != c.want {
			t.Errorf("perMsg(%s, %d shards, %d slots) = %d, want %d", c.typ, c.total, c.slots, got, c.want)
		}
	}
	for i := range paceTypes + 10 {
		p.observe(fmt.Sprint("t", i), time.Microsecond)
	}
	p.mu.Lock()
	n := len(p.by)
	p.mu.Unlock()
	if n != paceTypes {
		t.Errorf("%d types remembered, want at most %d", n, paceTypes)
	}
}

// A job whose shards ran under a microsecond (run times of 0 µs) counts as short, not unknown.
func TestTerm_ObservesShardsUnderAMicrosecond(t *testing.T) {
	var p shardPace
	tm := &term{pace: &p}
	j := &job{spec: &protocol.Spec{Type: "tiny"}}
	j.cp.State, j.cp.Kind = jobs.StateSucceeded, protocol.KindAggregate
	j.bk.nRuns = paceSamples // every run 0 µs
	tm.observePace(j)
	if got := p.perMsg("tiny", 200, 6); got != 4 {
		t.Errorf("perMsg after shards of 0 µs = %d, want 4", got)
	}
}

// The second job of a type whose shards are short carries several shards a message, and is
// exact; the first, whose pace is unknown, carries one.
func TestCoordinator_ShortShardsTravelTogether(t *testing.T) {
	r := newRig(t)
	r.leadWith(1, func(c *Config) { c.Slots = func(string) int { return 2 } })
	r.work(worker.Config{Concurrency: 2})
	want := json.RawMessage(`{"shards":64,"index_sum":2016}`)
	for i, wantPer := range []int{1, 4} {
		id := r.submit("sleep", `{"shards":64}`)
		st := r.wait(id, 30*time.Second)
		if st.State != jobs.StateSucceeded {
			t.Fatalf("job %d: state %s: %s", i+1, st.State, st.Error)
		}
		sameJSON(t, st.Result, want)
		data, _, err := r.st.Get(context.Background(), protocol.CheckpointBlob(id))
		if err != nil {
			t.Fatal(err)
		}
		cp, err := protocol.DecodeCheckpoint(data)
		if err != nil {
			t.Fatal(err)
		}
		if cp.ShardsPerMsg != wantPer {
			t.Errorf("job %d: %d shards a message, want %d", i+1, cp.ShardsPerMsg, wantPer)
		}
	}
}
