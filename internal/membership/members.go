package membership

import (
	"cmp"
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultInterval is how often a worker announces itself.
const DefaultInterval = time.Second

// AskSuffix makes the subject on which a watcher that starts listening asks every worker to
// announce itself now (<subject>.ask), so that its view is whole within a round trip, not an
// announce interval. A new leader names its successors from that view: a crash in its first
// second would otherwise have had no watcher.
const AskSuffix = ".ask"

// askGap is the least time between two announcements made on request: asks from anyone on NATS
// cost each worker at most this rate.
const askGap = 100 * time.Millisecond

// Announce publishes snapshot() on subject every interval until ctx ends, and at once when asked
// on subject+AskSuffix (at most every askGap). A failed publish is logged at debug level and
// retried on the next tick (NATS reconnects by itself).
func Announce(ctx context.Context, nc *nats.Conn, subject string, interval time.Duration, log *slog.Logger, snapshot func() Announcement) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	asked := make(chan struct{}, 1)
	sub, err := nc.Subscribe(subject+AskSuffix, func(*nats.Msg) {
		select {
		case asked <- struct{}{}:
		default:
		}
	})
	if err != nil {
		log.Debug("listen for membership asks", "err", err)
	} else {
		defer func() { _ = sub.Unsubscribe() }()
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a := snapshot()
		a.SentAt = time.Now().UTC()
		last := time.Now()
		data, err := a.Encode()
		if err == nil {
			err = nc.Publish(subject, data)
		}
		if err != nil {
			log.Debug("announce membership", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-asked:
			// Asked: announce now, or askGap after the last announcement.
			if d := time.Until(last.Add(askGap)); d > 0 {
				gap := time.NewTimer(d)
				select {
				case <-ctx.Done():
					gap.Stop()
					return
				case <-gap.C:
				}
			}
		}
	}
}

// Member is a live worker as a watcher last heard it.
type Member struct {
	Announcement
	LastSeen time.Time `json:"last_seen"`
}

// Watcher keeps the set of workers heard from within the expiry given to Watch.
type Watcher struct {
	nc      *nats.Conn
	subject string
	expiry  time.Duration
	idle    time.Duration // on demand: unsubscribe after this long unread and not held; 0: always
	log     *slog.Logger

	mu       sync.Mutex
	sub      *nats.Subscription // nil while not listening
	since    time.Time          // when sub began
	held     bool
	lastRead time.Time
	stopped  bool
	members  map[string]Member
	bad      int
}

// Watch subscribes to subject and keeps the live set; a worker not heard from within expiry
// (default 3 × DefaultInterval) leaves it. Stop ends the subscription.
func Watch(nc *nats.Conn, subject string, expiry time.Duration, log *slog.Logger) (*Watcher, error) {
	w := newWatcher(nc, subject, expiry, 0, log)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.listenLocked(); err != nil {
		return nil, err
	}
	return w, nil
}

// WatchOnDemand is Watch for a member that needs the set only now and then: it listens while
// held (Hold) and for idle after each Live, and not otherwise. Every worker watching all the
// time would make membership traffic grow with the square of the cluster.
func WatchOnDemand(nc *nats.Conn, subject string, expiry, idle time.Duration, log *slog.Logger) *Watcher {
	return newWatcher(nc, subject, expiry, max(idle, 2*DefaultInterval), log)
}

func newWatcher(nc *nats.Conn, subject string, expiry, idle time.Duration, log *slog.Logger) *Watcher {
	return &Watcher{nc: nc, subject: subject, expiry: cmp.Or(max(expiry, 0), 3*DefaultInterval), idle: idle,
		log: cmp.Or(log, slog.Default()), members: map[string]Member{}}
}

func (w *Watcher) listenLocked() error {
	if w.sub != nil || w.stopped {
		return nil
	}
	sub, err := w.nc.Subscribe(w.subject, func(m *nats.Msg) { w.add(m.Data) })
	if err != nil {
		return err
	}
	w.sub, w.since = sub, time.Now()
	// The server has the subscription before the ask (one connection, in order): every answer
	// reaches it. Workers of an older build do not answer; their next tick does.
	_ = w.nc.Publish(w.subject+AskSuffix, nil)
	return nil
}

func (w *Watcher) unlistenLocked() {
	if w.sub != nil {
		_ = w.sub.Unsubscribe()
		w.sub = nil
		clear(w.members)
	}
}

// Hold keeps an on-demand watcher listening (on) or lets it stop when unread (off). A leader
// holds it: it names type holders and successors from it.
func (w *Watcher) Hold(on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.held = on
	if on {
		if err := w.listenLocked(); err != nil {
			w.log.Warn("watch membership", "err", err)
		}
	}
	w.expireLocked(time.Now())
}

// expireLocked stops an on-demand watcher that is neither held nor read within idle.
func (w *Watcher) expireLocked(now time.Time) {
	if w.idle > 0 && !w.held && now.Sub(w.lastRead) > w.idle {
		w.unlistenLocked()
	}
}

func (w *Watcher) add(data []byte) {
	a, err := DecodeAnnouncement(data)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		if w.bad++; w.bad == 1 || w.bad%100 == 0 {
			w.log.Warn("malformed membership announcement ignored", "err", err, "count", w.bad)
		}
		return
	}
	now := time.Now()
	w.members[a.ID] = Member{Announcement: *a, LastSeen: now}
	w.expireLocked(now)
}

// Live returns the workers heard from within the expiry, sorted by id. An on-demand watcher
// that was not listening starts now; within an announce interval of starting (here or by Hold)
// it waits to the end of that interval, to hear everyone.
func (w *Watcher) Live() []Member {
	w.mu.Lock()
	w.lastRead = time.Now()
	if err := w.listenLocked(); err != nil {
		w.log.Warn("watch membership", "err", err)
	}
	warm := time.Duration(0)
	if w.sub != nil && w.idle > 0 {
		warm = time.Until(w.since.Add(DefaultInterval + 100*time.Millisecond))
	}
	w.mu.Unlock()
	if warm > 0 {
		time.Sleep(warm)
		w.mu.Lock()
		w.lastRead = time.Now()
		w.mu.Unlock()
	}
	return w.Peek()
}

// Peek returns the live set as heard so far, without waiting and without starting an on-demand
// watcher: empty while it does not listen.
func (w *Watcher) Peek() []Member {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Member, 0, len(w.members))
	for id, m := range w.members {
		if now.Sub(m.LastSeen) > w.expiry {
			delete(w.members, id)
			continue
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Leader returns the live worker that announces the highest epoch as leader, if any (two can
// briefly claim it across a failover; the lease blob is the record).
func Leader(ms []Member) (Member, bool) {
	var best Member
	ok := false
	for _, m := range ms {
		if m.Leader && (!ok || m.Epoch > best.Epoch) {
			best, ok = m, true
		}
	}
	return best, ok
}

// Stop ends the subscription for good.
func (w *Watcher) Stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.unlistenLocked()
	w.stopped = true
}
