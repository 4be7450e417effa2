package worker

import (
	"context"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Exister tells whether a blob exists. When the worker's PartialStore implements it, shards of a
// job whose result is stored (the job succeeded) are dropped before they run. Replays after a NATS
// restart, or past the duplicate window, then cost one read per job instead of a run per shard.
type Exister interface {
	Exists(ctx context.Context, name string) (bool, error)
}

// replayAge: a shard delivered for the first time within this long of its publishing is taken for
// fresh and not checked (see mayBeReplay).
const replayAge = time.Second

// mayBeReplay reports whether d may be a replay of a job that ended: a redelivery, or a message
// older than replayAge (a NATS restart brings back messages from before it). The check of a fresh
// first delivery is skipped: it was a storage read on every job's path, one of each one-shard
// job's ten, while a replay of a job ended within a second of its shards' publishing is rare and
// costs only its run (the leader drops its results).
func mayBeReplay(d interface {
	Attempt() int
	Published() time.Time
}) bool {
	p := d.Published()
	return d.Attempt() > 1 || p.IsZero() || time.Since(p) > replayAge
}

// ended remembers jobs seen ended (bounded) and when running jobs were last checked.
type ended struct {
	st Exister

	mu      sync.Mutex
	gone    map[string]struct{}
	checked map[string]time.Time
}

const (
	endedRecheck = 5 * time.Second // a running job is checked again after this
	endedMax     = 10_000          // remembered jobs, each map
)

// is reports whether job has ended. Storage errors count as "not ended": the shard runs.
func (e *ended) is(ctx context.Context, job string) bool {
	if e == nil || e.st == nil {
		return false
	}
	now := time.Now()
	e.mu.Lock()
	_, gone := e.gone[job]
	at, seen := e.checked[job]
	e.mu.Unlock()
	if gone {
		return true
	}
	if seen && now.Sub(at) < endedRecheck {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ok, err := e.st.Exists(cctx, protocol.ResultBlob(job))
	cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil && ok {
		if len(e.gone) >= endedMax {
			clear(e.gone)
		}
		e.gone[job] = struct{}{}
		delete(e.checked, job)
		return true
	}
	if len(e.checked) >= endedMax {
		clear(e.checked)
	}
	e.checked[job] = now
	return false
}
