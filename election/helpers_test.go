package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// testClient returns an azblob client on the package's Azurite.
func testClient(t *testing.T) *azblob.Client {
	t.Helper()
	c, err := azblob.NewClientFromConnectionString(testenv.Azurite(t), nil)
	if err != nil {
		t.Fatalf("azblob client: %v", err)
	}
	return c
}

// testLogger discards logs unless ELECTION_TEST_LOG is set (tests' goroutines may outlive
// them, so t.Log is not safe here).
func testLogger() *slog.Logger {
	if os.Getenv("ELECTION_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func testConfig(container, id string) Config {
	return Config{
		Identity:      id,
		Container:     container,
		Blob:          "lease",
		LeaseDuration: 15 * time.Second,
		RenewInterval: time.Second,
		RetryInterval: 200 * time.Millisecond,
		Logger:        testLogger(),
	}
}

// leadEvent records one call of lead.
type leadEvent struct {
	node  int
	term  Term
	start time.Time
	end   time.Time // when lead saw its context done
	cause error     // context.Cause of the leader context
}

// cluster runs electors on one lease blob and records every term.
type cluster struct {
	t         *testing.T
	container string
	nodes     []*node

	holders    atomic.Int32 // lead calls in progress
	maxHolders atomic.Int32

	mu     sync.Mutex
	events []*leadEvent
}

type node struct {
	i      int
	e      *Elector
	api    BlobAPI
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func newCluster(t *testing.T, container string) *cluster {
	return &cluster{t: t, container: container}
}

// add creates an elector over api (nil: the real Azurite adapter) with cfg adjusted by edit.
func (c *cluster) add(api BlobAPI, edit func(*Config)) *node {
	c.t.Helper()
	if api == nil {
		api = NewAzureAPI(testClient(c.t))
	}
	cfg := testConfig(c.container, fmt.Sprintf("node-%d", len(c.nodes)))
	if edit != nil {
		edit(&cfg)
	}
	e, err := New(api, cfg)
	if err != nil {
		c.t.Fatalf("New: %v", err)
	}
	n := &node{i: len(c.nodes), e: e, api: api}
	c.nodes = append(c.nodes, n)
	return n
}

// pokeOthersOnRelease wires every node's OnRelease to Poke all other nodes, as production does
// over NATS. Call after all nodes were added.
func (c *cluster) pokeOthersOnRelease() {
	for _, n := range c.nodes {
		self := n
		self.e.cfg.OnRelease = func(Term) {
			for _, o := range c.nodes {
				if o != self {
					o.e.Poke()
				}
			}
		}
	}
}

// lead is the default lead function: record the term and wait for the context.
func (c *cluster) lead(n *node) func(context.Context) error {
	return func(ctx context.Context) error {
		term, ok := TermFromContext(ctx)
		if !ok {
			c.t.Errorf("leader context carries no Term")
		}
		ev := &leadEvent{node: n.i, term: term, start: time.Now()}
		h := c.holders.Add(1)
		for {
			m := c.maxHolders.Load()
			if h <= m || c.maxHolders.CompareAndSwap(m, h) {
				break
			}
		}
		c.mu.Lock()
		c.events = append(c.events, ev)
		c.mu.Unlock()
		<-ctx.Done()
		end := time.Now()
		c.holders.Add(-1)
		c.mu.Lock()
		ev.end, ev.cause = end, context.Cause(ctx)
		c.mu.Unlock()
		return ctx.Err()
	}
}

// start runs node n's Run with the recording lead function (or lead when non-nil).
func (c *cluster) start(n *node, lead func(context.Context) error) {
	if lead == nil {
		lead = c.lead(n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n.cancel, n.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		n.err = n.e.Run(ctx, lead)
	}(n.done)
	c.t.Cleanup(func() { n.stop(c.t) })
}

func (c *cluster) startAll() {
	for _, n := range c.nodes {
		c.start(n, nil)
	}
}

// stop cancels Run and waits for it to return nil.
func (n *node) stop(t *testing.T) {
	t.Helper()
	n.cancel()
	select {
	case <-n.done:
	case <-time.After(20 * time.Second):
		t.Errorf("node %d: Run did not return within 20s of its context ending", n.i)
		return
	}
	if n.err != nil {
		t.Errorf("node %d: Run returned %v, want nil", n.i, n.err)
	}
}

// leaders returns the nodes whose IsLeader is true.
func (c *cluster) leaders() []*node {
	var out []*node
	for _, n := range c.nodes {
		if n.e.IsLeader() {
			out = append(out, n)
		}
	}
	return out
}

// waitTerms waits until at least k terms started and returns a copy of the events.
func (c *cluster) waitTerms(k int, within time.Duration) []leadEvent {
	c.t.Helper()
	testenv.Eventually(c.t, within, 2*time.Millisecond, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.events) >= k
	}, "%d terms", k)
	return c.snapshot()
}

func (c *cluster) snapshot() []leadEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]leadEvent, len(c.events))
	for i, ev := range c.events {
		out[i] = *ev
	}
	return out
}

// current returns the node leading the last started term.
func (c *cluster) current() *node {
	evs := c.snapshot()
	return c.nodes[evs[len(evs)-1].node]
}

// hookAPI wraps a BlobAPI; a non-nil hook replaces the call.
type hookAPI struct {
	BlobAPI
	acquire func(ctx context.Context, next func() error) error
	renew   func(ctx context.Context, next func() error) error
	release func(ctx context.Context, next func() error) error
	setMeta func(ctx context.Context, next func() error) error
	brk     func(ctx context.Context, next func() error) error
}

func (h *hookAPI) AcquireLease(ctx context.Context, c, b, id string, d time.Duration) error {
	next := func() error { return h.BlobAPI.AcquireLease(ctx, c, b, id, d) }
	if h.acquire != nil {
		return h.acquire(ctx, next)
	}
	return next()
}

func (h *hookAPI) RenewLease(ctx context.Context, c, b, id string) error {
	next := func() error { return h.BlobAPI.RenewLease(ctx, c, b, id) }
	if h.renew != nil {
		return h.renew(ctx, next)
	}
	return next()
}

func (h *hookAPI) ReleaseLease(ctx context.Context, c, b, id string) error {
	next := func() error { return h.BlobAPI.ReleaseLease(ctx, c, b, id) }
	if h.release != nil {
		return h.release(ctx, next)
	}
	return next()
}

func (h *hookAPI) SetMetadata(ctx context.Context, c, b, id string, md map[string]string) error {
	next := func() error { return h.BlobAPI.SetMetadata(ctx, c, b, id, md) }
	if h.setMeta != nil {
		return h.setMeta(ctx, next)
	}
	return next()
}

// errUnavailable is a transient storage failure as the adapter reports a 503.
var errUnavailable = &StorageError{Op: "renew lease", StatusCode: http.StatusServiceUnavailable,
	Code: "ServerBusy", Err: errors.New("503 Service Unavailable")}

func (h *hookAPI) BreakLease(ctx context.Context, c, b, etag string) error {
	next := func() error { return h.BlobAPI.BreakLease(ctx, c, b, etag) }
	if h.brk != nil {
		return h.brk(ctx, next)
	}
	return next()
}

// hub is an in-memory heartbeat transport shared by a test's electors: each elector gets a
// port, which a test can cut off (no delivery either way, Healthy false) or mute (its beats
// are dropped, as when the process is dead or its beats are lost).
type hub struct {
	mu    sync.Mutex
	ports []*port
}

type port struct {
	h     *hub
	cut   atomic.Bool
	mute  atomic.Bool
	delay atomic.Int64 // ns each of this port's beats waits before delivery
	every atomic.Int64 // > 1: only beats whose Seq is a multiple of it are delivered
	mu    sync.Mutex
	fns   map[int]func(Beat)
	next  int
	sent  atomic.Uint64
	asked atomic.Uint64 // Healthy calls: one per look of a waiting follower
	heard atomic.Uint64 // beats delivered to this port's subscribers

	sfns map[int]func(Beat) // subscribers to the successors' beats (tiered)
}

// tiered is a port that also carries beats to the named successors alone
// (SuccessorHeartbeats), as package bus does.
type tiered struct{ *port }

var _ SuccessorHeartbeats = tiered{}

// PublishSuccessors delivers b to the successor subscriptions of every port.
func (p tiered) PublishSuccessors(ctx context.Context, b Beat) error {
	if p.cut.Load() {
		return errors.New("not connected")
	}
	p.sent.Add(1)
	p.deliver(b, true)
	return nil
}

// SubscribeSuccessors subscribes fn to the successors' beats.
func (p tiered) SubscribeSuccessors(fn func(Beat)) (func(), error) { return p.subscribe(true, fn), nil }

// namedNow reports whether p has a subscription to the successors' beats.
func (p *port) namedNow() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sfns) > 0
}

func (h *hub) port() *port {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := &port{h: h, fns: map[int]func(Beat){}}
	h.ports = append(h.ports, p)
	return p
}

func (p *port) Publish(ctx context.Context, b Beat) error {
	if p.cut.Load() {
		return errors.New("not connected")
	}
	if k := p.every.Load(); p.mute.Load() || (k > 1 && b.Seq%uint64(k) != 0) {
		return nil
	}
	p.sent.Add(1)
	if d := time.Duration(p.delay.Load()); d > 0 {
		time.AfterFunc(d, func() { p.deliver(b, false) })
		return nil
	}
	p.deliver(b, false)
	return nil
}

// deliver hands b to the subscriptions of every port that is not cut off while p is not: the
// successors' subscriptions (succ) or everyone's.
func (p *port) deliver(b Beat, succ bool) {
	p.h.mu.Lock()
	ports := append([]*port(nil), p.h.ports...)
	p.h.mu.Unlock()
	for _, q := range ports {
		if q.cut.Load() || p.cut.Load() {
			continue
		}
		q.mu.Lock()
		subs := q.fns
		if succ {
			subs = q.sfns
		}
		fns := make([]func(Beat), 0, len(subs))
		for _, fn := range subs {
			fns = append(fns, fn)
		}
		q.mu.Unlock()
		for _, fn := range fns {
			q.heard.Add(1)
			fn(b)
		}
	}
}

func (p *port) Subscribe(fn func(Beat)) (func(), error) { return p.subscribe(false, fn), nil }

// subscribe adds fn to p's subscriptions, the successors' (succ) or everyone's.
func (p *port) subscribe(succ bool, fn func(Beat)) (stop func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	subs := &p.fns
	if succ {
		subs = &p.sfns
	}
	if *subs == nil {
		*subs = map[int]func(Beat){}
	}
	id := p.next
	p.next++
	(*subs)[id] = fn
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(*subs, id)
	}
}

func (p *port) Healthy() bool {
	p.asked.Add(1)
	return !p.cut.Load()
}

// events records an elector's events.
type events struct {
	mu  sync.Mutex
	evs []Event
}

func (r *events) add(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *events) kinds() []EventKind {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []EventKind
	for _, ev := range r.evs {
		out = append(out, ev.Kind)
	}
	return out
}

func (r *events) of(kind EventKind) []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Event
	for _, ev := range r.evs {
		if ev.Kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// crashable makes node i's storage calls hang once crashed[i] is set: a crashed process that
// neither renews nor releases. It fills crashed[i].
func crashable(t *testing.T, crashed []*atomic.Bool) func(i int) BlobAPI {
	return func(i int) BlobAPI {
		crashed[i] = new(atomic.Bool)
		hang := func(ctx context.Context, next func() error) error {
			if crashed[i].Load() {
				<-ctx.Done()
				return ctx.Err()
			}
			return next()
		}
		return &hookAPI{BlobAPI: NewAzureAPI(testClient(t)), acquire: hang, renew: hang, release: hang, setMeta: hang, brk: hang}
	}
}
