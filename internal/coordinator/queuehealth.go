package coordinator

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// ErrQueueUnreachable: the leader has not reached the job queue for QueueCutOff; Healthy reports
// it, so the elector hands the lease to a worker that may reach it.
var ErrQueueUnreachable = errors.New("job queue unreachable")

// queueHealth tracks since when intake's receives fail (0: they work). A receive that hangs (a
// silent partition: the SDK's tries take up to a minute) counts as failing after hangAfter.
type queueHealth struct {
	since    atomic.Int64 // unix nanos of the first failure of the current run of failures
	inflight atomic.Int64 // unix nanos when the receive in flight started (0: none)
	last     atomic.Pointer[error]
}

const hangAfter = 5 * time.Second

var errHanging = errors.New("a receive has not returned")

func (q *queueHealth) begin() { q.inflight.Store(time.Now().UnixNano()) }

func (q *queueHealth) failed(err error) {
	q.inflight.Store(0)
	q.since.CompareAndSwap(0, time.Now().UnixNano())
	q.last.Store(&err)
}

func (q *queueHealth) ok() { q.since.Store(0); q.inflight.Store(0) }

// err is nil while the queue answers, else since when it does not and why.
func (q *queueHealth) err() (time.Duration, error) {
	s := q.since.Load()
	var last error
	if p := q.last.Load(); p != nil {
		last = *p
	}
	if i := q.inflight.Load(); s == 0 && i != 0 && time.Since(time.Unix(0, i)) > hangAfter {
		s, last = i, errHanging
	}
	if s == 0 {
		return 0, nil
	}
	d := time.Since(time.Unix(0, s))
	return d, fmt.Errorf("%w for %v: %v", ErrQueueUnreachable, d.Round(time.Second), last)
}
