package coordinator

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// A schedule with a chain makes, per tick, its three jobs once each (ids from the tick's), each
// after the previous, across a leader replaced mid-way and a term that died after its first
// spec: the next term writes the steps it did not.
func TestSchedule_ChainPerTickOnce(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	step := protocol.ChainStep{Type: "sleep", Params: json.RawMessage(`{"shards":2,"duration":"20ms"}`)}
	s := &protocol.Schedule{Name: "chain", UID: "u1", Every: "1s", Type: "sleep", Params: json.RawMessage(`{"shards":2,"duration":"20ms"}`),
		Overlap: protocol.OverlapAllow, CatchUp: "1m", CreatedAt: time.Now().Add(-2 * time.Second).Truncate(time.Second).UTC(), Then: []protocol.ChainStep{step, step}}
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, protocol.ScheduleBlob("chain"), data, store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	// A term of epoch 1 claimed the first tick and wrote its first spec, then died.
	dead := s.Next(s.CreatedAt)
	first := protocol.TickJobID("chain", "u1", dead)
	m := protocol.TickMarker{Schedule: "chain", UID: "u1", Tick: dead, Job: first, Epoch: 1, Term: "dead"}
	mb, _ := m.Encode()
	if _, err := r.st.Put(ctx, protocol.TickBlob("chain", "u1", dead), mb, store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	sp := protocol.Spec{ID: first, Type: "sleep", Params: s.Params, SubmittedAt: time.Now().UTC(), Schedule: "chain", Tick: &dead}
	sb, _ := sp.Encode()
	if _, err := r.st.Put(ctx, protocol.SpecBlob(first), sb, store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}

	r.work(worker.Config{})
	var mu sync.Mutex
	planned := map[string]time.Time{} // when each job was first planned
	fast := func(c *Config) {
		c.ScheduleInterval = 50 * time.Millisecond
		c.OnEvent = func(ev Event) {
			mu.Lock()
			defer mu.Unlock()
			if _, seen := planned[ev.Job]; ev.Kind == EventJobPlanned && !seen {
				planned[ev.Job] = time.Now()
			}
		}
	}
	l2 := r.leadWith(2, fast)
	time.Sleep(2200 * time.Millisecond)
	if err := l2.stop(); err != nil {
		t.Fatal(err)
	}
	l3 := r.leadWith(3, fast)
	time.Sleep(1500 * time.Millisecond)
	if err := r.cl.PauseSchedule(ctx, "chain"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)

	byTick := r.scheduleJobs("chain")
	if len(byTick) < 4 || len(byTick[dead]) != 3 {
		t.Fatalf("%d ticks, the dead term's tick made %v; want at least 4 ticks, 3 jobs each", len(byTick), byTick[dead])
	}
	for tk, ids := range byTick {
		slices.Sort(ids)
		f := protocol.TickJobID("chain", "u1", tk)
		if want := []string{f, protocol.ChainJobID(f, 2), protocol.ChainJobID(f, 3)}; !slices.Equal(ids, want) {
			t.Fatalf("tick %v made %v, want %v", tk, ids, want)
		}
		var prevEnd time.Time
		for i, id := range ids {
			st := r.wait(id, 30*time.Second)
			if st.State != jobs.StateSucceeded || st.Schedule != "chain" || st.Tick == nil || !st.Tick.Equal(tk) {
				t.Fatalf("step %d %s: %+v", i+1, id, st)
			}
			data, _, err := r.st.Get(ctx, protocol.SpecBlob(id))
			if err != nil {
				t.Fatal(err)
			}
			spec, _ := protocol.ParseSpec(data)
			if i > 0 && !slices.Equal(spec.After, []string{ids[i-1]}) {
				t.Fatalf("step %d %s runs after %v, want %s", i+1, id, spec.After, ids[i-1])
			}
			mu.Lock()
			at, ok := planned[id]
			mu.Unlock()
			if i > 0 && ok && at.Before(prevEnd) {
				t.Fatalf("step %d %s was planned at %v, before step %d ended at %v", i+1, id, at, i, prevEnd)
			}
			if st.FinishedAt == nil {
				t.Fatalf("step %d %s has no finish time", i+1, id)
			}
			prevEnd = *st.FinishedAt
		}
	}
	info, err := r.cl.Schedule(ctx, "chain")
	if err != nil || len(info.Then) != 2 || info.LastJob == "" || info.LastJob[len(info.LastJob)-2:] != "-3" {
		t.Fatalf("schedule info: %+v %v (last job must be a chain's last step)", info, err)
	}
	_ = l3
}
