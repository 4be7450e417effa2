package coordinator

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// countedDeletes is the rig's storage, counting how active markers are deleted: one by one or in
// batches.
type countedDeletes struct {
	*store.Container
	mu      sync.Mutex
	single  int   // active markers deleted one by one
	batches []int // size of each batch
}

func (s *countedDeletes) Delete(ctx context.Context, name string) error {
	if strings.HasPrefix(name, protocol.ActivePrefix) {
		s.mu.Lock()
		s.single++
		s.mu.Unlock()
	}
	return s.Container.Delete(ctx, name)
}

func (s *countedDeletes) DeleteBatch(ctx context.Context, names []string) error {
	s.mu.Lock()
	s.batches = append(s.batches, len(names))
	s.mu.Unlock()
	return s.Container.DeleteBatch(ctx, names)
}

// The active markers of jobs this term ended are deleted by the sweeper once intake is quiet, in
// batches, not one request each: twenty tiny jobs submitted together cost a few delete requests,
// and every marker is gone soon after.
func TestSweep_EndedJobsMarkersDeletedInBatches(t *testing.T) {
	r := newRig(t)
	st := &countedDeletes{Container: r.st}
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		// Queued before the term listens, so each is taken in with its marker (a small job
		// queued later has none: smalljob.go).
		ids[i] = r.submit("pi", `{"samples":1000,"shards":1}`)
	}
	r.leadOn(1, st, func(*Config) {})
	r.work(worker.Config{Concurrency: 4})
	for _, id := range ids {
		if st := r.wait(id, 30*time.Second); st.State != jobs.StateSucceeded {
			t.Fatalf("job %s: %s %s", id, st.State, st.Error)
		}
	}
	ctx := context.Background()
	eventually(t, 10*time.Second, "every active marker deleted", func() bool {
		marks, err := r.st.List(ctx, protocol.ActivePrefix)
		return err == nil && len(marks) == 0
	})
	st.mu.Lock()
	defer st.mu.Unlock()
	sum := 0
	for _, b := range st.batches {
		sum += b
	}
	if st.single != 0 || sum != n || len(st.batches) >= n {
		t.Fatalf("markers deleted one by one: %d; in batches: %v (want %d in fewer than %d batches)", st.single, st.batches, n, n)
	}
}

// A term that ends deletes the markers its sweeper holds before it returns (its lease is released
// after), so a handover does not leave the next leader every recent job to claim again.
func TestSweep_TermEndFlushes(t *testing.T) {
	r := newRig(t)
	st := &countedDeletes{Container: r.st}
	l := r.leadOn(1, st, func(*Config) {})
	r.work(worker.Config{Concurrency: 4})
	ids := []string{r.submit("pi", `{"samples":1000,"shards":1}`), r.submit("pi", `{"samples":1000,"shards":1}`)}
	for _, id := range ids {
		if st := r.wait(id, 30*time.Second); st.State != jobs.StateSucceeded {
			t.Fatalf("job %s: %s %s", id, st.State, st.Error)
		}
	}
	l.stop() // most likely before the sweeper's quiet half second
	marks, err := r.st.List(context.Background(), protocol.ActivePrefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 0 {
		t.Fatalf("active markers left by the stopped term: %v", marks)
	}
}
