package coordinator

import (
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// fairJob is a running job for the fair-dispatch logic alone.
func fairJob(id, typ string, prio, total int) *job {
	j := &job{id: id, spec: &protocol.Spec{ID: id, Type: typ, Priority: prio}, progress: make(chan struct{}, 1)}
	j.cp.Total, j.cp.ShardsPerMsg = total, 1
	j.stopDispatch = func() {}
	return j
}

func TestRebalance_SplitsTheTypeBudgetByPriority(t *testing.T) {
	c := &Coordinator{cfg: DefaultConfig().WithDefaults(), log: quietLog()}
	tm := c.newTerm(1)
	a, b, other := fairJob("a", "sleep", 0, 10000), fairJob("b", "sleep", 2, 10000), fairJob("c", "primes", 0, 10000)
	for _, j := range []*job{a, b, other} {
		tm.tab.add(j)
	}
	now := time.Now()
	tm.rebalance(now) // rate unknown: the floor
	if a.window.Load() != 51 || b.window.Load() != 204 || other.window.Load() != 256 {
		t.Fatalf("windows at the floor: a %d, b %d, other type %d; want 51, 204, 256", a.window.Load(), b.window.Load(), other.window.Load())
	}
	// 1,000 sleep shards merged in 100 ms: 10,000/s, a second of it is the budget.
	a.merged.Add(500)
	b.merged.Add(500)
	tm.rebalance(now.Add(fairInterval))
	if got := tm.fair.types["sleep"].budget; got != 10000 {
		t.Fatalf("budget %d, want 10000 (10,000/s × 1s)", got)
	}
	if a.window.Load() != 2000 || b.window.Load() != 8000 {
		t.Fatalf("windows a %d, b %d; want 2000 and 8000", a.window.Load(), b.window.Load())
	}
	// b fully dispatched: a gets the whole budget; a job ended leaves the split.
	b.cp.Dispatched = b.cp.Total
	tm.rebalance(now.Add(fairInterval + time.Millisecond))
	if a.window.Load() != 10000 {
		t.Fatalf("a's window %d once b is dispatched, want 10000", a.window.Load())
	}
}

func TestRoom_WholeMessagesAndQuarterWindows(t *testing.T) {
	c := &Coordinator{cfg: DefaultConfig().WithDefaults(), log: quietLog()}
	tm := c.newTerm(1)
	for _, tc := range []struct {
		name                          string
		window, merged, i, total, per int
		want                          int
	}{
		{"nothing outstanding: up to the window", 100, 0, 0, 1000, 1, 100},
		{"nothing outstanding, window below a message: one message", 8, 16, 16, 1000, 16, 16},
		{"window full", 100, 0, 100, 1000, 1, 0},
		{"less than a quarter free: wait", 100, 20, 100, 1000, 1, 0},
		{"a quarter free", 100, 25, 100, 1000, 1, 25},
		{"whole messages only", 100, 48, 64, 1000, 16, 80},
		{"the last shards", 100, 990, 995, 1000, 1, 5},
		{"at most a batch", 100000, 0, 0, 100000, 1, 1024},
	} {
		j := fairJob("j", "sleep", 0, tc.total)
		j.window.Store(int64(tc.window))
		j.merged.Store(int64(tc.merged))
		if got := tm.send.room(j, tc.i, tc.total, tc.per); got != tc.want {
			t.Errorf("%s: room %d, want %d", tc.name, got, tc.want)
		}
	}
}
