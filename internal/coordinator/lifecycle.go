package coordinator

import (
	"context"
	"time"
)

// lifecycle is the component that sees jobs out: the clean-up after a job ends (finish.go), its
// automatic retry (retry.go), its ended marker and its deletion when its retention passes
// (retention.go, retention_migrate.go). Its writes are fenced by the term's fence; it holds no
// job of the loop's, only their stored checkpoints.
type lifecycle struct {
	*fence
	reporter
	cfg   Config
	store Store
	queue delayedQueue
	bus   purger
	sweep *sweeper // deletes ended jobs' active markers in batches (sweep.go)
}

// delayedQueue queues a job to become visible later (Queue): retries.
type delayedQueue interface {
	EnqueueAfter(ctx context.Context, text string, delay time.Duration) error
}

// purger drops a job's messages from the streams (Bus).
type purger interface {
	PurgeJob(ctx context.Context, job string) error
	PurgeJobMessages(ctx context.Context, job string) error
}

var (
	_ delayedQueue = Queue(nil)
	_ purger       = Bus(nil)
)
