package client

import (
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/membership"
)

// jobFinished is the kind of the event a leader publishes when a job's terminal checkpoint is
// written (coordinator.EventJobFinished).
const jobFinished = "job_finished"

// endWatch wakes Wait when a member says a job ended: the leader's job_finished event on the
// cluster's events subject. The event is a hint only. Wait reads the job's status from storage
// either way, so a forged or lost event costs one read or one poll's wait, never a wrong answer.
// Without it, `worker submit --wait` learned of a 50 ms job's end at the next poll, up to 250 ms
// later.
type endWatch struct {
	nc      *nats.Conn
	subject string
}

// watch returns a channel that gets a value when an event says job id ended, and a function
// that stops watching. A subscription that fails gives a nil channel: Wait polls as before.
func (w *endWatch) watch(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	sub, err := w.nc.Subscribe(w.subject, func(m *nats.Msg) {
		e, err := membership.DecodeEvent(m.Data)
		if err != nil || e.Job != id || e.Kind != jobFinished {
			return
		}
		select {
		case ch <- struct{}{}:
		default:
		}
	})
	if err != nil {
		return nil, func() {}
	}
	// The subscription is registered with the server before the first status read, so an end
	// between that read and the wait is not missed.
	_ = w.nc.Flush()
	return ch, func() { _ = sub.Unsubscribe() }
}
