package coordinator

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// failingQueue fails every receive while fail is set.
type failingQueue struct {
	Queue
	fail atomic.Bool
}

func (q *failingQueue) Receive(ctx context.Context, n int, visibility time.Duration) ([]queue.Message, error) {
	if q.fail.Load() {
		return nil, errors.New("dial tcp: i/o timeout")
	}
	return q.Queue.Receive(ctx, n, visibility)
}

// A leader that cannot reach the job queue says so at once (IntakeErr, for /readyz), and fails
// Healthy after QueueCutOff, so the elector hands the lease over; both clear when it answers.
func TestCoordinator_QueueCutOffReportedThenHandedOver(t *testing.T) {
	r := newRig(t)
	fq := &failingQueue{Queue: r.q}
	fq.fail.Store(true)
	cfg := Config{Registry: builtin.Registry(), Logger: quietLog(), QueuePoll: 50 * time.Millisecond, QueueCutOff: time.Second}
	c, err := New(cfg, r.st, fq, connect(t, r.url), store.NewEnv(r.blob))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Lead(ctx, 5) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return errors.Is(c.IntakeErr(), ErrQueueUnreachable) }, "a failing queue not reported")
	if err := c.Healthy(); err != nil {
		t.Fatalf("Healthy before QueueCutOff: %v", err)
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return errors.Is(c.Healthy(), ErrQueueUnreachable) }, "no hand-over after QueueCutOff")
	fq.fail.Store(false)
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return c.IntakeErr() == nil && c.Healthy() == nil }, "still unhealthy with the queue back")
}
