package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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

// MsgID is the delivery's Nats-Msg-Id as published (covered by its MAC).
func (d *Delivery) MsgID() string { return d.msg.Headers().Get(jetstream.MsgIDHeader) }

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
	mc     jetstream.MessagesContext // the current iterator; replaced when the consumer is recreated
	cons   jetstream.Consumer        // the consumer mc pulls from
	cancel context.CancelFunc
	done   chan struct{}
}

// drainGrace is how long a stopping feed waits for its drain before it gives up on it.
const drainGrace = 3 * time.Second

// reopenGrace is how long a results feed whose consumer was deleted under a live stream waits
// before it looks for a newer leader's consumer and, finding none, creates its own again.
const reopenGrace = time.Second

// errDeposed ends a results feed whose consumer was deleted by a newer leader.
var errDeposed = errors.New("a newer leader's consumer holds the results stream")

// reopener creates a feed's consumer again after it was found missing; errDeposed ends the feed.
type reopener func(ctx context.Context) (jetstream.Consumer, error)

// startFeed pumps cons into a Feed; every message is verified (auth.go) first, and one that
// fails is dead-lettered under source and never handed on. When the consumer (or its stream)
// goes missing, reopen (nil: none) creates it again and the feed goes on.
func (b *Bus) startFeed(ctx context.Context, cons jetstream.Consumer, prefetch int, source string, reopen reopener) (*Feed, error) {
	messages := func(c jetstream.Consumer) (jetstream.MessagesContext, error) {
		// Missed heartbeats come out of Next: a consumer deleted while no pull was parked on it
		// sends no "consumer deleted" status, and nats.go alone would re-pull it forever.
		return c.Messages(jetstream.PullMaxMessages(prefetch), jetstream.PullHeartbeat(2*time.Second),
			jetstream.WithMessagesErrOnMissingHeartbeat(true))
	}
	mc, err := messages(cons)
	if err != nil {
		return nil, err
	}
	ch := make(chan *Delivery)
	ctx, cancel := context.WithCancel(ctx)
	f := &Feed{C: ch, mc: mc, cons: cons, cancel: cancel, done: make(chan struct{})}
	// next bounds each Next once a drain has had its grace: with the server unreachable, the
	// drain's unsubscribe waits for its reply (nats.go's 30 s drain timeout), and Next with it.
	// A leader stepping down during a NATS outage took 33 s to stop.
	next, endNext := context.WithCancel(context.Background())
	go func() {
		<-ctx.Done()
		// Drain, not Stop: messages already pulled into the client still come out of Next, and
		// the pump hands each back at once (Nak) instead of leaving it to wait out AckWait.
		f.iter().Drain()
		select {
		case <-f.done:
		case <-time.After(drainGrace):
			f.iter().Stop()
			endNext()
		}
	}()
	go func() {
		defer close(f.done)
		defer close(ch)
		defer endNext()
		for {
			m, err := f.iter().Next(jetstream.NextContext(next))
			if err != nil {
				if errors.Is(err, jetstream.ErrMsgIteratorClosed) || ctx.Err() != nil {
					return // closed, or draining and the buffer yields an error: stop here
				}
				f.mu.Lock()
				f.errs++
				f.last = err
				f.mu.Unlock()
				if errors.Is(err, jetstream.ErrNoHeartbeat) {
					err = f.check(ctx) // is the consumer still there?
				}
				if consumerMissing(err) {
					if reopen == nil || !f.reopen(ctx, reopen, messages) {
						return
					}
					continue
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

// check asks the server for the feed's consumer after a missed heartbeat. It returns the
// lookup's error: consumer (or stream) not found says the feed must recreate it.
func (f *Feed) check(ctx context.Context) error {
	f.mu.Lock()
	cons := f.cons
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := cons.Info(ctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return jetstream.ErrConsumerNotFound
	}
	return err
}

func (f *Feed) iter() jetstream.MessagesContext {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mc
}

// reopen recreates the feed's consumer and iterator, retrying until it works, ctx ends, or the
// consumer belongs to someone else now (errDeposed). It reports whether the feed goes on.
func (f *Feed) reopen(ctx context.Context, reopen reopener, messages func(jetstream.Consumer) (jetstream.MessagesContext, error)) bool {
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		cons, err := reopen(ctx)
		var mc jetstream.MessagesContext
		if err == nil {
			mc, err = messages(cons)
		}
		if err == nil {
			f.mu.Lock()
			old := f.mc
			f.mc, f.cons = mc, cons
			f.mu.Unlock()
			old.Stop()
			return true
		}
		if errors.Is(err, errDeposed) || ctx.Err() != nil {
			return false
		}
		f.mu.Lock()
		f.errs++
		f.last = err
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(pause):
		}
	}
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
// creates "leader-<epoch>". A deposed leader's feed ends when its consumer is deleted. When the
// consumer or the stream goes missing otherwise (an operator removed it), the feed creates it
// again and goes on, unless a newer leader's consumer is there (heal.go).
func (b *Bus) OpenResults(ctx context.Context, epoch uint64, prefetch int) (*Feed, error) {
	s, err := b.stream(ctx, b.resultStream, "results feed")
	if err != nil {
		return nil, fmt.Errorf("results stream: %w", err)
	}
	name := fmt.Sprintf("%s-%d", leaderConsumer, epoch)
	cc := b.resultsConsumerConfig(name)
	var cons jetstream.Consumer
	// A deposed leader whose consumer was just deleted may create it again before it learns of
	// this term (its reopen waits reopenGrace first): delete it again and retry.
	for try := 0; ; try++ {
		old, err := consumerNames(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("list results consumers: %w", err)
		}
		for _, n := range old {
			if n == name {
				continue
			}
			if err := s.DeleteConsumer(ctx, n); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil, fmt.Errorf("delete results consumer %s: %w", n, err)
			}
		}
		cons, err = s.CreateOrUpdateConsumer(ctx, cc)
		if err == nil {
			break
		}
		if try >= 4 || ctx.Err() != nil {
			return nil, fmt.Errorf("create results consumer %s: %w", name, err)
		}
	}
	// A deposed leader's feed that looked before ours existed made its consumer again: delete
	// it, so that its feed looks again and finds ours (each side looks after its own create).
	if names, err := consumerNames(ctx, s); err == nil {
		for _, n := range names {
			if e, ok := leaderEpoch(n); ok && e < epoch {
				_ = s.DeleteConsumer(ctx, n)
			}
		}
	}
	reopen := func(ctx context.Context) (jetstream.Consumer, error) {
		s, err := b.js.Stream(ctx, b.resultStream)
		if err == nil {
			// The stream is there but our consumer is not: a new leader deleting the
			// consumers before it creates its own, or an operator. Give a new leader the time
			// to create its own before looking.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(reopenGrace):
			}
		} else if s, err = b.stream(ctx, b.resultStream, "results feed"); err != nil {
			return nil, err
		}
		names, err := consumerNames(ctx, s)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if e, ok := leaderEpoch(n); ok && e > epoch {
				return nil, errDeposed
			}
		}
		c, err := s.CreateOrUpdateConsumer(ctx, cc)
		if err != nil {
			return nil, err
		}
		// A newer leader may have made its consumer while ours was made: look again after.
		if names, err := consumerNames(ctx, s); err == nil {
			for _, n := range names {
				if e, ok := leaderEpoch(n); ok && e > epoch {
					_ = s.DeleteConsumer(ctx, name)
					return nil, errDeposed
				}
			}
		}
		b.rebuilt(Rebuilt{Kind: "consumer", Name: name, Stream: b.resultStream, Where: "results feed"})
		return c, nil
	}
	return b.startFeed(ctx, cons, max(prefetch, 1), SourceResults, reopen)
}

func (b *Bus) resultsConsumerConfig(name string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.cfg.ResultsAckWait,
		MaxDeliver: -1, MaxAckPending: b.cfg.ResultsMaxAckPending, DeliverPolicy: jetstream.DeliverAllPolicy,
		FilterSubject: b.names.ResultSubject(">"), InactiveThreshold: 0,
	}
}

func consumerNames(ctx context.Context, s jetstream.Stream) ([]string, error) {
	names := s.ConsumerNames(ctx)
	var out []string
	for n := range names.Name() {
		out = append(out, n)
	}
	return out, names.Err()
}

// leaderEpoch parses the epoch of a results consumer "leader-<epoch>".
func leaderEpoch(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, leaderConsumer+"-")
	if !ok {
		return 0, false
	}
	e, err := strconv.ParseUint(rest, 10, 64)
	return e, err == nil
}

// JobOfSubject returns the job id at the end of a shards or results subject.
func JobOfSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}
