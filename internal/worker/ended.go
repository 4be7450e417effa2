package worker

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Propser reads a blob's properties. When the worker's PartialStore implements it, shards of a
// job whose checkpoint says it succeeded (its status record) are dropped before they run.
// Replays after a NATS restart, or past the duplicate window, then cost one read per job instead
// of a run per shard. The checkpoint, not the result copy, is read: a small result is stored in
// the final checkpoint only (docs/design.md, "A small job's requests").
type Propser interface {
	Props(ctx context.Context, name string) (store.Props, error)
}

// freshFor is how recently a small job's shard must have been sent for its first delivery to
// skip the check of its end: the leader held the job live then (its shards' ids say when they
// were sent, under their MAC). A replay (a republish after NATS forgot the ids) comes later and
// is checked; so is a redelivery. Clocks skewed by more than this only cost a check.
const freshFor = 2 * time.Second

// sentJustNow reports whether d is the first delivery of a shard message the leader sent within
// freshFor (protocol.FreshShardMsgID).
func sentJustNow(d interface {
	Attempt() int
	MsgID() string
}) bool {
	if d.Attempt() != 1 {
		return false
	}
	at, ok := protocol.ShardSentAt(d.MsgID())
	if !ok {
		return false
	}
	age := time.Since(at)
	return age < freshFor && age > -freshFor
}

// ended remembers jobs seen ended (bounded) and when running jobs were last checked.
type ended struct {
	st Propser

	mu      sync.Mutex
	gone    map[string]struct{}
	checked map[string]time.Time
	// flight makes one read of a job's record for the checks that come at once: a worker's slots
	// all take a job's first shards together, and each read its record (a HEAD each).
	flight singleflight.Group
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
	v, _, _ := e.flight.Do(job, func() (any, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return e.succeeded(cctx, job), nil
	})
	ok := v.(bool)
	e.mu.Lock()
	defer e.mu.Unlock()
	if ok {
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

// succeeded reads job's checkpoint's status record; a checkpoint without one (a job re-planned
// by an older release) or an error counts as "not yet".
func (e *ended) succeeded(ctx context.Context, job string) bool {
	p, err := e.st.Props(ctx, protocol.CheckpointBlob(job))
	if err != nil {
		return false
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	return err == nil && rec.State == jobs.StateSucceeded
}
