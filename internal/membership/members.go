package membership

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultInterval is how often a worker announces itself.
const DefaultInterval = time.Second

// Announce publishes snapshot() on subject every interval until ctx ends. A failed publish is
// logged at debug level and retried on the next tick (NATS reconnects by itself).
func Announce(ctx context.Context, nc *nats.Conn, subject string, interval time.Duration, log *slog.Logger, snapshot func() Announcement) {
	if interval <= 0 {
		interval = DefaultInterval
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		a := snapshot()
		a.SentAt = time.Now().UTC()
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
		}
	}
}

// Member is a live worker as a watcher last heard it.
type Member struct {
	Announcement
	LastSeen time.Time `json:"last_seen"`
}

// Watcher keeps the set of workers heard from within Expiry.
type Watcher struct {
	expiry time.Duration
	sub    *nats.Subscription
	log    *slog.Logger

	mu      sync.Mutex
	members map[string]Member
	bad     int
}

// Watch subscribes to subject and keeps the live set; a worker not heard from within expiry
// (default 3 × DefaultInterval) leaves it. Stop ends the subscription.
func Watch(nc *nats.Conn, subject string, expiry time.Duration, log *slog.Logger) (*Watcher, error) {
	if expiry <= 0 {
		expiry = 3 * DefaultInterval
	}
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{expiry: expiry, members: map[string]Member{}, log: log}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { w.add(m.Data) })
	if err != nil {
		return nil, err
	}
	w.sub = sub
	return w, nil
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
	w.members[a.ID] = Member{Announcement: *a, LastSeen: time.Now()}
}

// Live returns the workers heard from within the expiry, sorted by id.
func (w *Watcher) Live() []Member {
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

// Stop ends the subscription.
func (w *Watcher) Stop() { _ = w.sub.Unsubscribe() }
