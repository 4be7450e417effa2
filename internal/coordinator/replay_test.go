package coordinator

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// countingStore records the calls on one job's blobs.
type countingStore struct {
	Store
	job string

	mu     sync.Mutex
	writes []string
	reads  int
}

func (c *countingStore) note(write bool, op, name string) {
	if !strings.HasPrefix(name, c.job+"/") && !strings.HasSuffix(name, c.job) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if write {
		c.writes = append(c.writes, op+" "+name)
	} else {
		c.reads++
	}
}

func (c *countingStore) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	c.note(true, "put", name)
	return c.Store.Put(ctx, name, data, cond)
}

func (c *countingStore) Delete(ctx context.Context, name string) error {
	c.note(true, "delete", name)
	return c.Store.Delete(ctx, name)
}

func (c *countingStore) Get(ctx context.Context, name string) ([]byte, store.ETag, error) {
	c.note(false, "get", name)
	return c.Store.Get(ctx, name)
}

func (c *countingStore) Exists(ctx context.Context, name string) (bool, error) {
	c.note(false, "exists", name)
	return c.Store.Exists(ctx, name)
}

func (c *countingStore) Props(ctx context.Context, name string) (store.Props, error) {
	c.note(false, "props", name)
	return c.Store.Props(ctx, name)
}

// Results of a job that succeeded, replayed to a new leader (new message ids: past the duplicate
// window, or after a NATS restart), cost one read and no write.
func TestCoordinator_ReplayedResultsOfEndedJobWriteNothing(t *testing.T) {
	r := newRig(t)
	first := r.lead(3)
	id := r.submit("sleep", `{"shards":4}`)
	shards := r.shardsOf(4)
	for _, m := range shards {
		r.result(m, 3, 1, nil)
	}
	st := r.wait(id, 30*time.Second)
	sameJSON(t, st.Result, json.RawMessage(`{"shards":4,"index_sum":6}`))
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		marks, err := r.st.List(context.Background(), protocol.EndedPrefix)
		return err == nil && slices.ContainsFunc(marks, func(b jobs.BlobInfo) bool { return strings.HasSuffix(b.Name, "-"+id) })
	}, "clean-up not done (no ended marker)")
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}

	cs := &countingStore{Store: r.st, job: id}
	r.leadOn(4, cs, func(*Config) {})
	for _, m := range shards {
		r.result(m, 3, 7, nil) // attempt 7: new message ids
	}
	testenv.Eventually(t, 10*time.Second, 20*time.Millisecond, func() bool {
		cs.mu.Lock()
		defer cs.mu.Unlock()
		return cs.reads >= 1
	}, "the replayed results were not looked at")
	time.Sleep(500 * time.Millisecond) // the rest of the replay
	cs.mu.Lock()
	defer cs.mu.Unlock()
	if len(cs.writes) != 0 || cs.reads > 4 {
		t.Fatalf("replayed results of an ended job: %d reads, writes %v; want one read per message at most and no write", cs.reads, cs.writes)
	}
}
