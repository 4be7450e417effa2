package worker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

type fakeDelivery struct {
	attempt int
	id      string
}

func (d fakeDelivery) Attempt() int  { return d.attempt }
func (d fakeDelivery) MsgID() string { return d.id }

// A small job's shard sent a moment ago skips the check of its job's end on its first delivery;
// a replay (sent long ago), a redelivery and any other shard are checked.
func TestSentJustNow(t *testing.T) {
	now := time.Now()
	fresh := func(at time.Time) string { return protocol.FreshShardMsgID("job-1", 0, "term", at) + "~k~tag" }
	for _, tc := range []struct {
		name string
		d    fakeDelivery
		want bool
	}{
		{"fresh, first delivery", fakeDelivery{1, fresh(now)}, true},
		{"fresh, clock a second behind", fakeDelivery{1, fresh(now.Add(time.Second))}, true},
		{"redelivered", fakeDelivery{2, fresh(now)}, false},
		{"replayed later", fakeDelivery{1, fresh(now.Add(-5 * time.Second))}, false},
		{"sent in the future", fakeDelivery{1, fresh(now.Add(time.Minute))}, false},
		{"a stored job's shard", fakeDelivery{1, protocol.ShardMsgID("job-1", 0)}, false},
		{"no id", fakeDelivery{1, ""}, false},
	} {
		if got := sentJustNow(tc.d); got != tc.want {
			t.Errorf("%s: sentJustNow = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// slowPropser counts reads of status records, each held until release is closed.
type slowPropser struct {
	reads   atomic.Int32
	release chan struct{}
}

func (p *slowPropser) Props(ctx context.Context, name string) (store.Props, error) {
	p.reads.Add(1)
	<-p.release
	return store.Props{}, fmt.Errorf("stat %s: %w", name, store.ErrNotFound)
}

// The checks of one job that come at once (a worker's slots taking its first shards together)
// make one read of its record, not one each.
func TestEnded_ChecksAtOnceReadOnce(t *testing.T) {
	p := &slowPropser{release: make(chan struct{})}
	e := &ended{st: p, gone: map[string]struct{}{}, checked: map[string]time.Time{}}
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if e.is(context.Background(), "job-1") {
				t.Error("a job without a checkpoint counted as ended")
			}
		}()
	}
	testenv.Eventually(t, 10*time.Second, time.Millisecond, func() bool { return p.reads.Load() == 1 }, "no read of the record")
	time.Sleep(20 * time.Millisecond) // the other checks are waiting on the one read by now
	close(p.release)
	wg.Wait()
	if n := p.reads.Load(); n != 1 {
		t.Fatalf("6 checks at once read the record %d times, want 1", n)
	}
	// Checked a moment ago: no read; another job: its own.
	e.is(context.Background(), "job-1")
	e.is(context.Background(), "job-2")
	if n := p.reads.Load(); n != 2 {
		t.Fatalf("reads after a recent check and another job's: %d, want 2", n)
	}
}
