package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxShardLimit bounds ShardOptions.Limit: the most shards one feed holds at once.
const MaxShardLimit = 4096

// ShardOptions configures a feed of shards.
type ShardOptions struct {
	// Types are the job types to pull: one durable consumer per type, so a worker never receives a
	// shard of a type it does not have. Required.
	Types []string
	// Limit returns how many shards the feed may hold at once (queued in C, running, and waiting
	// for their result to be stored), 1 to MaxShardLimit. It is read before every pull, so the
	// worker can adapt it. Each type that has nothing queued may hold one more, while it waits.
	Limit func() int
	// KeepAlive is how often every held shard is marked in progress. Default a third of the
	// bus's ShardTimeout.
	KeepAlive time.Duration
}

// ShardFeed pulls shards of some job types, as many as its owner wants at once, and keeps every
// shard it holds alive. Its owner reads C, settles every delivery (Ack, Nak or Term) and calls
// Stop when done.
//
// Every shard the feed pulled is tracked from the moment it arrives until it is settled. One
// ticker marks them all in progress (+WPI) every KeepAlive, so a shard never times out while its
// worker lives, however long it runs or waits in C. The shard timeout can be short: it only
// measures how long a dead worker's shards wait. No goroutine or timer is created per shard.
//
// Pulls are explicit (a fetch of exactly the free credit), not a prefetching iterator, so no
// shard sits untracked in a client buffer.
type ShardFeed struct {
	// C yields deliveries; it is closed when the feed stops.
	C  <-chan *Delivery
	ch chan *Delivery

	b     *Bus
	limit func() int
	types int

	mu       sync.Mutex
	held     map[*Delivery]struct{}
	reserved int
	errs     int
	last     error

	wakes  []chan struct{} // one per pump: credit was freed
	cancel context.CancelFunc

	// polls is the context idle long polls run under: a reconnect cancels it (and makes the
	// next), since the server forgets a pull request whose connection dropped, and so does a
	// stream or consumer this member rebuilt (a pull parked on a deleted stream is never answered).
	pollMu     sync.Mutex
	polls      context.Context
	pollCancel context.CancelFunc
	wg         sync.WaitGroup
	once       sync.Once
}

// Shards starts a feed of the per-type shard consumers, creating those that do not exist.
func (b *Bus) Shards(ctx context.Context, opt ShardOptions) (*ShardFeed, error) {
	if len(opt.Types) == 0 {
		return nil, errors.New("shards feed: no job types: register at least one job type")
	}
	if opt.Limit == nil {
		return nil, errors.New("shards feed: no Limit")
	}
	if opt.KeepAlive <= 0 {
		opt.KeepAlive = max(b.cfg.ShardTimeout/3, 100*time.Millisecond)
	}
	conses := make([]jetstream.Consumer, len(opt.Types))
	for i, typ := range opt.Types {
		c, err := b.shardConsumer(ctx, typ, false)
		if err != nil {
			return nil, err
		}
		conses[i] = c
	}
	ch := make(chan *Delivery, MaxShardLimit+len(opt.Types)+1)
	ctx, cancel := context.WithCancel(ctx)
	f := &ShardFeed{C: ch, ch: ch, b: b, limit: opt.Limit, types: len(opt.Types),
		held: map[*Delivery]struct{}{}, cancel: cancel}
	for range opt.Types {
		f.wakes = append(f.wakes, make(chan struct{}, 1))
	}
	f.polls, f.pollCancel = context.WithCancel(ctx)
	connected := b.nc.StatusChanged(nats.CONNECTED)
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer b.nc.RemoveStatusListener(connected)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-connected:
				if !ok {
					return
				}
			case <-b.rebuiltSignal(): // a stream or consumer was rebuilt: pull again at once
			}
			f.pollMu.Lock()
			f.pollCancel()
			f.polls, f.pollCancel = context.WithCancel(ctx)
			f.pollMu.Unlock()
		}
	}()
	for i, typ := range opt.Types {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			f.pump(ctx, typ, conses[i], f.wakes[i])
		}()
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		f.keepAlive(ctx, opt.KeepAlive)
	}()
	return f, nil
}

// shardConsumer creates (or finds) type typ's consumer. lost says a pull found it missing: it is
// then reported as recreated (heal.go), as it is when its stream was missing too.
func (b *Bus) shardConsumer(ctx context.Context, typ string, lost bool) (jetstream.Consumer, error) {
	cc := b.workersConsumerConfig(typ)
	var c jetstream.Consumer
	var err error = jetstream.ErrStreamNotFound
	if !lost {
		c, err = b.js.CreateOrUpdateConsumer(ctx, b.shardStream, cc)
	}
	if StreamMissing(err) {
		c, err = b.healConsumer(ctx, b.shardStream, cc, "shards feed")
	}
	if err != nil {
		return nil, fmt.Errorf("shards consumer for type %q: %w", typ, err)
	}
	return c, nil
}

// idlePoll is how long an idle type's long poll waits for a shard before it asks again. Each ask
// is a request and a status reply on NATS and a subscription of the client's, for every type of
// every worker: at 5 s they were most of an idle cluster's messages. A pull request the server
// forgets (the connection dropped) is asked again at the reconnect, not at the poll's end.
const idlePoll = 15 * time.Second

// pump pulls one type's shards: at once as many as the credit allows while the type has some
// queued, else a long poll for one.
func (f *ShardFeed) pump(ctx context.Context, typ string, cons jetstream.Consumer, wake <-chan struct{}) {
	lost := false // the consumer was found missing
	for ctx.Err() == nil {
		if cons == nil {
			c, err := f.b.shardConsumer(ctx, typ, lost)
			if err != nil {
				f.fail(ctx, err)
				continue
			}
			cons, lost = c, false
		}
		n := f.reserve()
		if n == 0 {
			select {
			case <-ctx.Done():
				return
			case <-wake:
			}
			continue
		}
		batch, err := cons.FetchNoWait(n)
		got := 0
		if err == nil {
			got, err = f.drain(ctx, batch, true)
		}
		f.unreserve(n - got)
		if err != nil {
			if consumerMissing(err) || StreamMissing(err) {
				cons, lost = nil, true
			}
			f.fail(ctx, err)
			continue
		}
		if got > 0 {
			continue
		}
		// Nothing queued: wait for the next shard with a long poll (holding one credit over the
		// limit, so a quiet type never starves a busy one).
		f.pollMu.Lock()
		polls := f.polls
		f.pollMu.Unlock()
		wctx, cancel := context.WithTimeout(polls, idlePoll)
		batch, err = cons.Fetch(1, jetstream.FetchContext(wctx))
		if err == nil {
			_, err = f.drain(ctx, batch, false)
		}
		cancel()
		if err != nil && ctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			if consumerMissing(err) || StreamMissing(err) {
				cons, lost = nil, true
			}
			f.fail(ctx, err)
		}
	}
}

// drain tracks and hands out every message of a batch (each taking one reserved credit when
// fromCredit). Once the feed stops, the rest go back.
func (f *ShardFeed) drain(ctx context.Context, batch jetstream.MessageBatch, fromCredit bool) (int, error) {
	got := 0
	for m := range batch.Messages() {
		if err := f.b.verify(m); err != nil {
			// Never tracked nor handed on: its credit is free again at once.
			if fromCredit {
				got++
				f.mu.Lock()
				f.reserved--
				f.mu.Unlock()
				f.wake()
			}
			f.b.refuse(ctx, m, SourceShards, err)
			continue
		}
		d := newDelivery(m)
		d.feed = f
		f.mu.Lock()
		f.held[d] = struct{}{}
		if fromCredit {
			got++
			f.reserved-- // the credit is now a held delivery
		}
		f.mu.Unlock()
		if ctx.Err() != nil {
			_ = d.Nak(0)
			continue
		}
		select {
		case f.ch <- d:
		case <-ctx.Done():
			_ = d.Nak(0)
		}
	}
	err := batch.Error()
	if ctx.Err() != nil {
		err = nil
	}
	return got, err
}

// reserve takes the free credit for one fetch, or 0 when too little is free to be worth a pull.
func (f *ShardFeed) reserve() int {
	lim := min(max(f.limit(), 1), MaxShardLimit)
	f.mu.Lock()
	defer f.mu.Unlock()
	used := len(f.held) + f.reserved
	avail := lim - used
	if avail <= 0 || used > 0 && avail < max(1, lim/4) {
		return 0
	}
	f.reserved += avail
	return avail
}

// unreserve returns what is left of a fetch's credit (each delivered message already took one).
func (f *ShardFeed) unreserve(n int) {
	f.mu.Lock()
	f.reserved -= n
	f.mu.Unlock()
	if n > 0 {
		f.wake()
	}
}

// wake tells every pump that credit was freed.
func (f *ShardFeed) wake() {
	for _, w := range f.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

func (f *ShardFeed) release(d *Delivery) {
	f.mu.Lock()
	delete(f.held, d)
	f.mu.Unlock()
	f.wake()
}

func (f *ShardFeed) fail(ctx context.Context, err error) {
	f.mu.Lock()
	f.errs++
	f.last = err
	f.mu.Unlock()
	select {
	case <-ctx.Done():
	case <-time.After(250 * time.Millisecond):
	}
}

// keepAlive marks every held shard in progress every interval: one ticker for the whole feed.
func (f *ShardFeed) keepAlive(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var ds []*Delivery
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.Lock()
		ds = ds[:0]
		for d := range f.held {
			ds = append(ds, d)
		}
		f.mu.Unlock()
		for _, d := range ds {
			_ = d.msg.InProgress()
		}
	}
}

// Held is how many shards the feed holds (queued, running or settling).
func (f *ShardFeed) Held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.held)
}

// Err returns how many pull errors the feed recovered from and the last one.
func (f *ShardFeed) Err() (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.errs, f.last
}

// Stop ends the pulls and the keep-alive, hands back (Nak) every shard still queued in C for
// immediate redelivery, and closes C. Shards already taken from C stay the owner's to settle.
func (f *ShardFeed) Stop() {
	f.once.Do(func() {
		f.cancel()
		f.wg.Wait()
		for len(f.ch) > 0 {
			select {
			case d := <-f.ch: // the owner may take it first
				_ = d.Nak(0)
			default:
			}
		}
		close(f.ch)
	})
}
