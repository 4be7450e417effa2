package coordinator

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// In-memory ports (raft's InmemStore, InmemTransport): the coordinator's Store, Queue and Bus
// without servers, for table tests of pure rules. What crosses a process stays on real servers.

// memStore is a Store in memory: conditional writes with ETags, as blob storage does them.
type memStore struct {
	mu    sync.Mutex
	n     int
	blobs map[string]memBlob
	// onDelete, when set, runs before each delete (outside the lock): a test's fault.
	onDelete func(name string)
}

type memBlob struct {
	data []byte
	etag store.ETag
	meta map[string]string
}

var (
	_ Store = (*memStore)(nil)
	_ interface {
		DeleteBatch(ctx context.Context, names []string) error
	} = (*memStore)(nil)
)

func newMemStore() *memStore { return &memStore{blobs: map[string]memBlob{}} }

func (s *memStore) Get(_ context.Context, name string) ([]byte, store.ETag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	if !ok {
		return nil, "", fmt.Errorf("get %s: %w", name, store.ErrNotFound)
	}
	return slices.Clone(b.data), b.etag, nil
}

func (s *memStore) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	return s.PutMeta(ctx, name, data, nil, cond)
}

func (s *memStore) PutMeta(_ context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	switch {
	case cond.IfNoneMatch && ok:
		return "", fmt.Errorf("put %s: %w", name, store.ErrExists)
	case cond.IfMatch != "" && (!ok || b.etag != cond.IfMatch):
		return "", fmt.Errorf("put %s: %w", name, store.ErrConflict)
	}
	s.n++
	etag := store.ETag(strconv.Itoa(s.n))
	s.blobs[name] = memBlob{data: slices.Clone(data), etag: etag, meta: maps.Clone(meta)}
	return etag, nil
}

func (s *memStore) Delete(_ context.Context, name string) error {
	if s.onDelete != nil {
		s.onDelete(name)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.blobs, name)
	return nil
}

func (s *memStore) DeleteBatch(ctx context.Context, names []string) error {
	for _, n := range names {
		_ = s.Delete(ctx, n)
	}
	return nil
}

func (s *memStore) Exists(_ context.Context, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.blobs[name]
	return ok, nil
}

func (s *memStore) List(_ context.Context, prefix string) ([]jobs.BlobInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []jobs.BlobInfo
	for name, b := range s.blobs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, jobs.BlobInfo{Name: name, Size: int64(len(b.data))})
		}
	}
	slices.SortFunc(out, func(a, b jobs.BlobInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *memStore) Props(_ context.Context, name string) (store.Props, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.blobs[name]
	if !ok {
		return store.Props{}, fmt.Errorf("props %s: %w", name, store.ErrNotFound)
	}
	return store.Props{Size: int64(len(b.data)), ETag: b.etag, Meta: maps.Clone(b.meta)}, nil
}

// names lists the blobs under prefix.
func (s *memStore) names(prefix string) []string {
	infos, _ := s.List(context.Background(), prefix)
	out := make([]string, len(infos))
	for i, b := range infos {
		out[i] = b.Name
	}
	return out
}

// memQueue is a Queue in memory: messages become visible at their time, as on the Azure queue.
type memQueue struct {
	mu   sync.Mutex
	now  func() time.Time
	n    int
	msgs []*memMsg
}

type memMsg struct {
	m       queue.Message
	visible time.Time
}

var _ Queue = (*memQueue)(nil)

func newMemQueue(now func() time.Time) *memQueue { return &memQueue{now: now} }

func (q *memQueue) Enqueue(ctx context.Context, text string) error {
	return q.EnqueueAfter(ctx, text, 0)
}

func (q *memQueue) EnqueueAfter(_ context.Context, text string, delay time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n++
	q.msgs = append(q.msgs, &memMsg{m: queue.Message{ID: strconv.Itoa(q.n), Text: text}, visible: q.now().Add(delay)})
	return nil
}

func (q *memQueue) Receive(_ context.Context, n int, visibility time.Duration) ([]queue.Message, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []queue.Message
	now := q.now()
	for _, mm := range q.msgs {
		if len(out) == n {
			break
		}
		if !now.Before(mm.visible) {
			q.n++
			mm.m.DequeueCount++
			mm.m.PopReceipt = strconv.Itoa(q.n)
			mm.visible = now.Add(visibility)
			out = append(out, mm.m)
		}
	}
	return out, nil
}

func (q *memQueue) Delete(_ context.Context, m queue.Message) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, mm := range q.msgs {
		if mm.m.ID == m.ID {
			if mm.m.PopReceipt != m.PopReceipt {
				return errors.New("memqueue: stale pop receipt")
			}
			q.msgs = slices.Delete(q.msgs, i, i+1)
			return nil
		}
	}
	return errors.New("memqueue: no such message")
}

// queued returns each message's text and when it becomes visible.
func (q *memQueue) queued() map[string]time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[string]time.Time{}
	for _, mm := range q.msgs {
		out[mm.m.Text] = mm.visible
	}
	return out
}

// memBus is a Bus in memory: it records what is published, purged and dead-lettered. It has no
// results feed (bus.Feed is JetStream's): the loop's merging is tested on real servers.
type memBus struct {
	mu        sync.Mutex
	published []bus.Outgoing
	purged    []string
	dead      []string // reasons
	subs      map[string][]func([]byte)
}

var _ Bus = (*memBus)(nil)

func newMemBus() *memBus { return &memBus{subs: map[string][]func([]byte){}} }

func (b *memBus) PublishAll(_ context.Context, msgs []bus.Outgoing) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.published = append(b.published, msgs...)
	return nil
}

func (b *memBus) ShardTypeSubject(typ, job string) string { return "shards." + typ + "." + job }

func (b *memBus) PurgeJob(_ context.Context, job string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.purged = append(b.purged, job)
	return nil
}

func (b *memBus) PurgeJobMessages(ctx context.Context, job string) error { return b.PurgeJob(ctx, job) }

func (b *memBus) OpenResults(context.Context, uint64, int) (*bus.Feed, error) {
	return nil, errors.New("membus: no results feed")
}

func (b *memBus) DeadLetter(_ context.Context, _ string, _ []byte, reason string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.dead = append(b.dead, reason)
	return nil
}

func (b *memBus) JobBacklog(context.Context, string) (uint64, uint64, error) { return 0, 0, nil }

func (b *memBus) Subscribe(subject string, fn func([]byte)) (func(), error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.subs[subject] = append(b.subs[subject], fn)
	return func() {}, nil
}

// memClock is a settable clock for Config.Now.
type memClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *memClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *memClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// memTerm is a term over in-memory ports, its components wired as Lead wires them; nothing runs.
type memTerm struct {
	*term
	c     *Coordinator
	st    *memStore
	q     *memQueue
	b     *memBus
	clock *memClock
}

func newMemTerm(epoch uint64, edit func(*Config)) *memTerm {
	clock := &memClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	cfg := Config{Logger: quietLog(), Now: clock.now}
	if edit != nil {
		edit(&cfg)
	}
	st, q, b := newMemStore(), newMemQueue(clock.now), newMemBus()
	c, err := New(cfg, st, q, b, nil)
	if err != nil {
		panic(err)
	}
	return &memTerm{term: c.newTerm(epoch), c: c, st: st, q: q, b: b, clock: clock}
}
