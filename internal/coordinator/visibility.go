package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/queue"
)

// Extender is implemented by a Queue that can keep a received message hidden longer
// (queue.Queue.Extend). With it, intake receives with a short QueueVisibility and extends it while
// it plans, so the messages of a leader that died come back within seconds, not a minute.
type Extender interface {
	Extend(ctx context.Context, m queue.Message, visibility time.Duration) (queue.Message, error)
}

var _ Extender = (*queue.Queue)(nil)

// hidden keeps one received batch hidden while intake plans it. Deleting a message goes through
// it, under the same lock as an extension, so a delete always uses the latest pop receipt. The
// batches of successive receives may overlap: in.hiding finds a message's own.
type hidden struct {
	mu   sync.Mutex
	msgs map[string]queue.Message // by id: received, not yet deleted
}

// hiding maps a message id to the received batch it is kept hidden in.
type hiding struct {
	mu sync.Mutex
	by map[string]*hidden
}

func (hs *hiding) store(id string, h *hidden) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.by == nil {
		hs.by = map[string]*hidden{}
	}
	hs.by[id] = h
}

// forget drops id's entry if it is still h's (a later batch may hold the message again).
func (hs *hiding) forget(id string, h *hidden) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	if hs.by[id] == h {
		delete(hs.by, id)
	}
}

func (hs *hiding) load(id string) *hidden {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return hs.by[id]
}

// latest returns m with the newest pop receipt and forgets it (it is being deleted); the caller
// deletes while holding the returned unlock.
func (hs *hiding) latest(m queue.Message) (queue.Message, func()) {
	h := hs.load(m.ID)
	if h == nil {
		return m, func() {}
	}
	h.mu.Lock()
	if n, ok := h.msgs[m.ID]; ok {
		m = n
		delete(h.msgs, m.ID)
	}
	return m, h.mu.Unlock
}
