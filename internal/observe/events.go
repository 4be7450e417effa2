package observe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
)

// historySize bounds the events kept (this worker's own, and the cluster's).
const historySize = 1000

// Recorder keeps this worker's election and coordinator events with timestamps, publishes them
// on NATS for tools and tests, and keeps the events of the whole cluster heard on NATS (for the
// dashboard's epoch history and timelines). Its hooks never block.
type Recorder struct {
	// PublishOnly: Run publishes this worker's events but collects nobody's (Cluster stays
	// empty). For a worker without an HTTP server, which nobody asks: every member hearing every
	// event costs the cluster N deliveries an event.
	PublishOnly bool

	worker string
	out    chan membership.Event

	mu      sync.Mutex
	seq     uint64
	own     []membership.Event
	cluster []membership.Event
	bad     int
}

// NewRecorder returns a recorder for worker id.
func NewRecorder(worker string) *Recorder {
	return &Recorder{worker: worker, out: make(chan membership.Event, 256)}
}

// Election records an election event (wire it to election.Config.OnEvent).
func (r *Recorder) Election(ev election.Event) {
	e := membership.Event{Kind: string(ev.Kind), At: ev.At.UTC(), Epoch: ev.Term.Epoch}
	if ev.Err != nil {
		e.Err = protocol.Redact(ev.Err.Error())
	}
	r.add(e)
}

// Coordinator records a coordinator event (wire it to coordinator.Config.OnEvent).
func (r *Recorder) Coordinator(ev coordinator.Event) {
	e := membership.Event{Kind: string(ev.Kind), At: ev.At.UTC(), Epoch: ev.Epoch, Job: ev.Job, Shard: ev.Shard, State: ev.State, Count: ev.Count}
	if ev.Err != nil {
		e.Err = protocol.Redact(ev.Err.Error())
	}
	r.add(e)
}

// EventRebuilt is the kind of a Rebuilt event.
const EventRebuilt = "rebuilt"

// Rebuilt records that this worker found something of the cluster's missing and created it
// again: what is "stream", "consumer", "container" or "queue" (the event's State), missing
// describes it and where it was found missing (the event's Err); epoch is the term this worker
// leads (0: none). Wire it to bus.Config.OnRebuilt, store.Container.OnRebuilt and
// queue.Queue.OnRebuilt.
func (r *Recorder) Rebuilt(what, missing string, epoch uint64) {
	r.add(membership.Event{Kind: EventRebuilt, At: time.Now().UTC(), Epoch: epoch, State: what,
		Err: protocol.Redact("missing, created again: " + missing)})
}

func (r *Recorder) add(e membership.Event) {
	r.mu.Lock()
	r.seq++
	e.Seq, e.Worker, e.V = r.seq, r.worker, membership.Version
	r.own = appendRing(r.own, e)
	r.mu.Unlock()
	select {
	case r.out <- e:
	default: // NATS is slow or gone: the event stays in /api/events
	}
}

func appendRing(s []membership.Event, e membership.Event) []membership.Event {
	if len(s) >= historySize {
		s = append(s[:0], s[len(s)-historySize/2:]...)
	}
	return append(s, e)
}

// Own returns this worker's events with Seq > since.
func (r *Recorder) Own(since uint64) []membership.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []membership.Event{}
	for _, e := range r.own {
		if e.Seq > since {
			out = append(out, e)
		}
	}
	return out
}

// Cluster returns the events heard from every worker (this one included) since this worker started.
func (r *Recorder) Cluster() []membership.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]membership.Event{}, r.cluster...)
}

// Run publishes this worker's events on subject and collects everyone's, until ctx ends.
func (r *Recorder) Run(ctx context.Context, nc *nats.Conn, subject string, log *slog.Logger) error {
	if r.PublishOnly {
		return r.publish(ctx, nc, subject, log)
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		e, err := membership.DecodeEvent(m.Data)
		r.mu.Lock()
		defer r.mu.Unlock()
		if err != nil {
			if r.bad++; r.bad == 1 || r.bad%100 == 0 {
				log.Warn("malformed cluster event ignored", "err", err, "count", r.bad)
			}
			return
		}
		r.cluster = appendRing(r.cluster, *e)
	})
	if err != nil {
		return err
	}
	defer func() { _ = sub.Unsubscribe() }()
	return r.publish(ctx, nc, subject, log)
}

// publish publishes this worker's events on subject until ctx ends.
func (r *Recorder) publish(ctx context.Context, nc *nats.Conn, subject string, log *slog.Logger) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-r.out:
			data, err := e.Encode()
			if err == nil {
				err = nc.Publish(subject, data)
			}
			if err != nil {
				log.Debug("publish event", "kind", e.Kind, "err", err)
			}
		}
	}
}
