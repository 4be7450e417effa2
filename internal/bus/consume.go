package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Delivery is one message handed to a consumer.
type Delivery struct {
	msg     jetstream.Msg
	attempt int
	feed    *ShardFeed // set for shards: settling releases the delivery from its feed
}

// Data is the message body.
func (d *Delivery) Data() []byte { return d.msg.Data() }

// Subject is the message subject.
func (d *Delivery) Subject() string { return d.msg.Subject() }

// Attempt is the delivery count: 1 for the first delivery.
func (d *Delivery) Attempt() int { return d.attempt }

// Ack removes the message from its work-queue stream.
func (d *Delivery) Ack() error { d.release(); return d.msg.Ack() }

// Nak asks for redelivery after delay.
func (d *Delivery) Nak(delay time.Duration) error { d.release(); return d.msg.NakWithDelay(delay) }

// InProgress resets the message's ack timer (+WPI): the consumer is still working on it.
func (d *Delivery) InProgress() error { return d.msg.InProgress() }

// Term stops redelivery for good.
func (d *Delivery) Term(reason string) error { d.release(); return d.msg.TermWithReason(reason) }

func (d *Delivery) release() {
	if d.feed != nil {
		d.feed.release(d)
	}
}

func newDelivery(m jetstream.Msg) *Delivery {
	d := &Delivery{msg: m, attempt: 1}
	if md, err := m.Metadata(); err == nil && md.NumDelivered > 0 {
		d.attempt = int(md.NumDelivered)
	}
	return d
}

// Dead-letter sources of the deliveries a feed refuses.
const (
	SourceShards  = "shards"
	SourceResults = "results"
)

// Feed pumps a pull consumer into a channel. Its owner reads C and calls Stop when done.
type Feed struct {
	// C yields deliveries; it is closed when the feed stops.
	C <-chan *Delivery
	// Errors counts pull errors the feed recovered from (missed heartbeats, reconnects).
	mu     sync.Mutex
	errs   int
	last   error
	mc     jetstream.MessagesContext
	cancel context.CancelFunc
	done   chan struct{}
}

// drainGrace is how long a stopping feed waits for its drain before it gives up on it.
const drainGrace = 3 * time.Second

// startFeed pumps cons into a Feed; every message is verified (auth.go) first, and one that
// fails is dead-lettered under source and never handed on.
func (b *Bus) startFeed(ctx context.Context, cons jetstream.Consumer, prefetch int, source string) (*Feed, error) {
	mc, err := cons.Messages(jetstream.PullMaxMessages(prefetch), jetstream.PullHeartbeat(2*time.Second))
	if err != nil {
		return nil, err
	}
	ch := make(chan *Delivery)
	ctx, cancel := context.WithCancel(ctx)
	f := &Feed{C: ch, mc: mc, cancel: cancel, done: make(chan struct{})}
	// next bounds each Next once a drain has had its grace: with the server unreachable, the
	// drain's unsubscribe waits for its reply (nats.go's 30 s drain timeout), and Next with it.
	// A leader stepping down during a NATS outage took 33 s to stop.
	next, endNext := context.WithCancel(context.Background())
	go func() {
		<-ctx.Done()
		// Drain, not Stop: messages already pulled into the client still come out of Next, and
		// the pump hands each back at once (Nak) instead of leaving it to wait out AckWait.
		mc.Drain()
		select {
		case <-f.done:
		case <-time.After(drainGrace):
			mc.Stop()
			endNext()
		}
	}()
	go func() {
		defer close(f.done)
		defer close(ch)
		defer endNext()
		for {
			m, err := mc.Next(jetstream.NextContext(next))
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
					return // closed, or draining and the buffer yields an error: stop here
				}
				f.mu.Lock()
				f.errs++
				f.last = err
				f.mu.Unlock()
				if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(100 * time.Millisecond):
				}
				continue
			}
			if ctx.Err() != nil {
				_ = m.Nak() // stopping: redeliver to another consumer now
				continue
			}
			if err := b.verify(m); err != nil {
				b.refuse(ctx, m, source, err)
				continue
			}
			select {
			case ch <- newDelivery(m):
			case <-ctx.Done():
				_ = m.Nak()
			}
		}
	}()
	return f, nil
}

// Err returns how many pull errors the feed recovered from and the last one.
func (f *Feed) Err() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs, f.last
}

// Stop ends the feed and waits for its goroutine. Messages pulled but not yet read are handed
// back (Nak) for immediate redelivery.
func (f *Feed) Stop() {
	f.cancel()
	<-f.done
}

// OpenResults makes this leader the only consumer of the results stream: it deletes every other
// consumer (a previous leader's, whose unacknowledged results become deliverable at once) and
// creates "leader-<epoch>". A deposed leader's feed ends when its consumer is deleted.
func (b *Bus) OpenResults(ctx context.Context, epoch uint64, prefetch int) (*Feed, error) {
	s, err := b.js.Stream(ctx, b.resultStream)
	if err != nil {
		return nil, fmt.Errorf("results stream: %w", err)
	}
	name := fmt.Sprintf("%s-%d", leaderConsumer, epoch)
	names := s.ConsumerNames(ctx)
	var old []string
	for n := range names.Name() {
		if n != name {
			old = append(old, n)
		}
	}
	if err := names.Err(); err != nil {
		return nil, fmt.Errorf("list results consumers: %w", err)
	}
	for _, n := range old {
		if err := s.DeleteConsumer(ctx, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, fmt.Errorf("delete results consumer %s: %w", n, err)
		}
	}
	cons, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.cfg.ResultsAckWait,
		MaxDeliver: -1, MaxAckPending: b.cfg.ResultsMaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: b.names.ResultSubject(">"), InactiveThreshold: 0,
	})
	if err != nil {
		return nil, fmt.Errorf("create results consumer %s: %w", name, err)
	}
	return b.startFeed(ctx, cons, max(prefetch, 1), SourceResults)
}

// JobOfSubject returns the job id at the end of a shards or results subject.
func JobOfSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}
