package election

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// countAPI counts the lease-blob requests of one elector.
type countAPI struct {
	BlobAPI
	acquires, reads, breaks atomic.Int64
	hang                    atomic.Bool // a crashed process: every call hangs until its context ends
}

func (c *countAPI) wait(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

func (c *countAPI) AcquireLease(ctx context.Context, ct, b, id string, d time.Duration) error {
	if c.hang.Load() {
		return c.wait(ctx)
	}
	c.acquires.Add(1)
	return c.BlobAPI.AcquireLease(ctx, ct, b, id, d)
}

func (c *countAPI) GetProperties(ctx context.Context, ct, b string) (BlobProps, error) {
	if c.hang.Load() {
		return BlobProps{}, c.wait(ctx)
	}
	c.reads.Add(1)
	return c.BlobAPI.GetProperties(ctx, ct, b)
}

func (c *countAPI) RenewLease(ctx context.Context, ct, b, id string) error {
	if c.hang.Load() {
		return c.wait(ctx)
	}
	return c.BlobAPI.RenewLease(ctx, ct, b, id)
}

func (c *countAPI) ReleaseLease(ctx context.Context, ct, b, id string) error {
	if c.hang.Load() {
		return c.wait(ctx)
	}
	return c.BlobAPI.ReleaseLease(ctx, ct, b, id)
}

func (c *countAPI) SetMetadata(ctx context.Context, ct, b, id string, md map[string]string) error {
	if c.hang.Load() {
		return c.wait(ctx)
	}
	return c.BlobAPI.SetMetadata(ctx, ct, b, id, md)
}

func (c *countAPI) BreakLease(ctx context.Context, ct, b, etag string) error {
	if c.hang.Load() {
		return c.wait(ctx)
	}
	c.breaks.Add(1)
	return c.BlobAPI.BreakLease(ctx, ct, b, etag)
}

// newRankedCluster is an hbCluster of n electors over counting APIs whose leaders name every
// other node as successors, by index.
func newRankedCluster(t *testing.T, prefix string, n int) (*hbCluster, []*countAPI) {
	apis := make([]*countAPI, n)
	ids := make([]string, n)
	for i := range n {
		ids[i] = fmt.Sprintf("node-%d", i)
	}
	c := newHBCluster(t, prefix, n, func(i int) BlobAPI {
		apis[i] = &countAPI{BlobAPI: NewAzureAPI(testClient(t))}
		return apis[i]
	}, func(cfg *Config) { cfg.Successors = func() []string { return ids } })
	return c, apis
}

func (c *hbCluster) followerRequests(apis []*countAPI, leader int) (acquires, reads, breaks int64) {
	for i, a := range apis {
		if i != leader {
			acquires, reads, breaks = acquires+a.acquires.Load(), reads+a.reads.Load(), breaks+a.breaks.Load()
		}
	}
	return
}

func resetCounts(apis []*countAPI) {
	for _, a := range apis {
		a.acquires.Store(0)
		a.reads.Store(0)
		a.breaks.Store(0)
	}
}

// Followers that hear a live leader's beats send the lease blob nothing, however long they
// follow; after a graceful release the first successor acquires, and the others wait their turn
// and see its beats instead of all acquiring at once.
func TestElector_FollowersLeaveTheLeaseBlobAlone(t *testing.T) {
	t.Parallel()
	c, apis := newRankedCluster(t, "scquiet", 6)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	resetCounts(apis)
	time.Sleep(10 * testConfig("", "").RetryInterval)
	if a, r, b := c.followerRequests(apis, first.node); a+r+b != 0 {
		t.Fatalf("5 followers of a live leader sent %d acquires, %d reads and %d breaks in 10 retry intervals, want none", a, r, b)
	}

	resetCounts(apis)
	c.nodes[first.node].stop(t)
	next := c.waitTerms(2, 5*time.Second)[1]
	time.Sleep(2 * TurnStep * MaxSuccessors) // every turn has passed
	a, r, b := c.followerRequests(apis, first.node)
	t.Logf("graceful handover to node %d: followers sent %d acquires, %d reads, %d breaks", next.node, a, r, b)
	if b != 0 || a > 2 {
		t.Errorf("after a graceful release the followers sent %d acquires and %d breaks, want 1 or 2 and none", a, b)
	}
}

// A crashed leader's first named successor alone breaks its lease and takes over; when that
// successor crashed too, the second takes over one TurnStep later. One break each time.
func TestElector_OneBreakerAfterACrash(t *testing.T) {
	t.Parallel()
	c, apis := newRankedCluster(t, "sconebreak", 8)
	c.startAll()
	first := c.waitTerms(1, 10*time.Second)[0]
	c.followersHeard(first.node, first.term.Epoch)
	crash := func(i int) {
		apis[i].hang.Store(true)
		c.ports[i].cut.Store(true)
	}
	defer func() {
		for _, a := range apis {
			a.hang.Store(false)
		}
	}()
	succ := func(leader, k int) int { // the k-th successor the leader names (node ids by index, itself left out)
		if k >= leader {
			k++
		}
		return k
	}
	// Crash the leader and its first successor: the second successor takes over alone.
	s0, s1 := succ(first.node, 0), succ(first.node, 1)
	resetCounts(apis)
	at := time.Now()
	crash(first.node)
	crash(s0)
	next := c.waitTerms(2, 5*time.Second)[1]
	took := next.start.Sub(at)
	time.Sleep(2 * testSuspicion)
	_, _, b := c.followerRequests(apis, first.node)
	t.Logf("leader %d and successor %d crashed: node %d took over after %v with %d breaks", first.node, s0, next.node, took, b)
	if next.node != s1 {
		t.Errorf("node %d took over, want the second successor %d", next.node, s1)
	}
	if b != 1 {
		t.Errorf("%d lease breaks, want 1", b)
	}
	if got := len(c.snapshot()); got != 2 {
		t.Errorf("%d terms, want 2: a late break deposed the new leader", got)
	}
	if bound := testSuspicion + TurnStep + time.Second; took > bound {
		t.Errorf("takeover took %v, want <= %v", took, bound)
	}
}
