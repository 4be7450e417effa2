package election_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	neturl "net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
)

// quiet discards logs unless ELECTION_TEST_LOG is set.
var quiet = func() *slog.Logger {
	if os.Getenv("ELECTION_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.Default()
}()

// startNATSOn starts an in-process NATS server on 127.0.0.1:port.
func startNATSOn(t *testing.T, port int) *server.Server {
	return testenv.NATSServer(t, &server.Options{Port: port})
}

// deadAPI fails every call once its process has "crashed": a dead leader renews nothing and
// releases nothing.
type deadAPI struct {
	election.BlobAPI
	dead atomic.Bool
}

var errDead = errors.New("process is dead")

func (d *deadAPI) RenewLease(ctx context.Context, c, b, id string) error {
	if d.dead.Load() {
		return errDead
	}
	return d.BlobAPI.RenewLease(ctx, c, b, id)
}

func (d *deadAPI) ReleaseLease(ctx context.Context, c, b, id string) error {
	if d.dead.Load() {
		return errDead
	}
	return d.BlobAPI.ReleaseLease(ctx, c, b, id)
}

// mutedBeats drops this process's beats once muted (a leader whose beats are lost or late while
// its connection, and so its term's answer, stays up).
type mutedBeats struct {
	*bus.Heartbeats
	muted atomic.Bool
	named atomic.Pointer[[]string] // the successors of the last beat published
}

func (m *mutedBeats) Publish(ctx context.Context, b election.Beat) error {
	if m.muted.Load() {
		return nil
	}
	m.named.Store(&b.Successors)
	return m.Heartbeats.Publish(ctx, b)
}

// PublishSuccessors is Publish for the beats only the named successors hear.
func (m *mutedBeats) PublishSuccessors(ctx context.Context, b election.Beat) error {
	if m.muted.Load() {
		return nil
	}
	m.named.Store(&b.Successors)
	return m.Heartbeats.PublishSuccessors(ctx, b)
}

// successors named by the last beat published.
func (m *mutedBeats) successors() []string {
	if p := m.named.Load(); p != nil {
		return *p
	}
	return nil
}

type probeNode struct {
	id    string
	link  *faultproxy.Proxy // its link to NATS (probeOpts.proxied)
	blob  *faultproxy.Proxy // its link to blob storage (probeOpts.storageProxied)
	bus   *bus.Bus
	api   *deadAPI
	beats *mutedBeats
	el    *election.Elector
	stop  context.CancelFunc // a graceful stop of this process
	hold  atomic.Int64       // how long lead goes on after its context ended (a final checkpoint), ns
}

type probeCluster struct {
	t     *testing.T
	nodes []*probeNode

	noView atomic.Bool // every node's view of the members is empty (a new leader's, at first)

	mu     sync.Mutex
	events []election.Event
	ids    []string // identity of each event's elector
}

// probeOpts vary a probe cluster.
type probeOpts struct {
	proxied        bool          // each node reaches NATS through a fault proxy of its own
	storageProxied bool          // each node reaches blob storage through a fault proxy of its own
	probeTimeout   time.Duration // bounds one probe instead of the default
}

// newProbeCluster runs n electors with real heartbeats and probes over NATS at url and real
// leases on Azurite, with the default timings.
func newProbeCluster(t *testing.T, url string, n int) *probeCluster {
	t.Helper()
	return newProbeClusterWith(t, url, n, probeOpts{})
}

func newProbeClusterWith(t *testing.T, url string, n int, o probeOpts) *probeCluster {
	t.Helper()
	client, err := azblob.NewClientFromConnectionString(testenv.Azurite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	container := testenv.Name(t, "probe")
	c := &probeCluster{t: t}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		for _, n := range c.nodes {
			n.bus.Close()
		}
	})
	ids := []string{"a-node", "b-node", "c-node", "d-node"}
	for i := range n {
		id := ids[i]
		nodeURL, link := url, (*faultproxy.Proxy)(nil)
		if o.proxied {
			u, err := neturl.Parse(url)
			if err != nil {
				t.Fatal(err)
			}
			if link, err = faultproxy.New(u.Host); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = link.Close() })
			nodeURL = "nats://" + link.Addr()
		}
		b, err := bus.Connect(nodeURL, id, bus.Config{Keys: testkeys.Keys()}, bus.ConnEvents(quiet)...)
		if err != nil {
			t.Fatal(err)
		}
		nodeClient, blob := client, (*faultproxy.Proxy)(nil)
		if o.storageProxied {
			nodeClient, blob = proxiedBlob(t, testenv.Azurite(t))
		}
		pn := &probeNode{id: id, link: link, blob: blob, bus: b, api: &deadAPI{BlobAPI: election.NewAzureAPI(nodeClient)}, beats: &mutedBeats{Heartbeats: b.Heartbeats()}}
		cfg := election.Config{
			Identity: id, Container: container, Heartbeats: pn.beats, Prober: b.TermProber(), Logger: quiet,
			Successors: func() []string { // as node names them: every member, by id
				if c.noView.Load() {
					return nil
				}
				return ids[:n]
			},
			OnEvent: func(ev election.Event) {
				c.mu.Lock()
				defer c.mu.Unlock()
				c.events, c.ids = append(c.events, ev), append(c.ids, id)
			},
		}
		pn.el, err = election.New(pn.api, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if o.probeTimeout > 0 {
			election.SetProbeTimeout(pn.el, o.probeTimeout)
		}
		c.nodes = append(c.nodes, pn)
		nctx, stop := context.WithCancel(ctx)
		pn.stop = stop
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pn.el.Run(nctx, func(lctx context.Context) error {
				<-lctx.Done()
				time.Sleep(time.Duration(pn.hold.Load()))
				return nil
			})
		}()
	}
	return c
}

// of returns the events of kind, with the identity of the elector that emitted each.
func (c *probeCluster) of(kind election.EventKind) (evs []election.Event, ids []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ev := range c.events {
		if ev.Kind == kind {
			evs, ids = append(evs, ev), append(ids, c.ids[i])
		}
	}
	return evs, ids
}

// leader waits for the k-th election and returns its node.
func (c *probeCluster) elected(k int, within time.Duration) (*probeNode, election.Event) {
	c.t.Helper()
	testenv.Eventually(c.t, within, 5*time.Millisecond, func() bool { evs, _ := c.of(election.EventElected); return len(evs) >= k },
		"election %d did not happen", k)
	evs, ids := c.of(election.EventElected)
	for _, n := range c.nodes {
		if n.id == ids[k-1] {
			return n, evs[k-1]
		}
	}
	c.t.Fatalf("no node %s", ids[k-1])
	return nil, election.Event{}
}

// since lists every event recorded, with its node and time relative to t0 (for a failure).
func (c *probeCluster) since(t0 time.Time) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for i, ev := range c.events {
		fmt.Fprintf(&b, "\n  %s %s epoch %d %v", c.ids[i], ev.Kind, ev.Term.Epoch, ev.At.Sub(t0).Round(time.Millisecond))
	}
	return b.String()
}

func (c *probeCluster) stats() (s election.Stats) {
	for _, n := range c.nodes {
		x := n.el.Stats()
		s.Terms += x.Terms
		s.Breaks += x.Breaks
		s.NoResponders += x.NoResponders
		s.ProbeAnswers += x.ProbeAnswers
		s.Suspicions += x.Suspicions
		s.Probes += x.Probes
	}
	return s
}

// A leader process that dies (its NATS connection closed abruptly, as the kernel does for a
// killed process; it renews and releases nothing) is replaced through the probe path: a
// follower's probes of its term find no responders, it breaks the lease fenced on the term's
// ETag, and a new term starts, long before the 1.5s suspicion timeout would have.
func TestProbe_CrashedLeaderReplacedByNoResponders(t *testing.T) {
	c := newProbeCluster(t, testenv.NATS(t), 3)
	old, first := c.elected(1, 20*time.Second)
	time.Sleep(time.Second) // the followers hear the term

	killed := time.Now()
	old.api.dead.Store(true)
	old.bus.Conn().Close()

	_, second := c.elected(2, 10*time.Second)
	took := second.At.Sub(killed)
	if second.Term.Epoch != first.Term.Epoch+1 || second.Term.Identity == old.id {
		t.Fatalf("second term %+v after %+v", second.Term, first.Term)
	}
	evs, _ := c.of(election.EventNoResponders)
	if len(evs) == 0 || evs[0].Term.Epoch != first.Term.Epoch {
		t.Fatalf("no no-responders confirmation of epoch %d (events %v); the takeover came from the heartbeat timeout", first.Term.Epoch, evs)
	}
	// The first successor watches the live term: its probe, not a missed beat, saw the crash.
	watcher := map[string]string{"a-node": "b-node", "b-node": "a-node", "c-node": "a-node"}[old.id]
	if seen, ids := c.of(election.EventProbing); len(seen) == 0 || ids[0] != watcher {
		t.Errorf("confirmation started by %v, want the watcher %s; events %s", ids, watcher, c.since(killed))
	} else {
		t.Logf("kill -> the watcher's probe found no responders %v", seen[0].At.Sub(killed).Round(time.Millisecond))
	}
	if s := c.stats(); s.NoResponders == 0 || s.Breaks == 0 {
		t.Errorf("stats %+v: want a break confirmed by no responders", s)
	}
	t.Logf("kill -> new leader %v (the confirmation at %v)", took.Round(time.Millisecond), evs[0].At.Sub(killed).Round(time.Millisecond))
}

// A new leader whose view of the members is still empty names the successors of the term it
// took over (but itself), so its term has a watcher from its first beat: a leader killed just
// after its election is seen by a probe, not after a silence.
func TestProbe_NewLeaderNamesInheritedSuccessors(t *testing.T) {
	c := newProbeCluster(t, testenv.NATS(t), 4)
	old, _ := c.elected(1, 20*time.Second)
	time.Sleep(time.Second) // the followers hear the term and its successors
	c.noView.Store(true)
	old.api.dead.Store(true)
	old.bus.Conn().Close()
	nu, _ := c.elected(2, 10*time.Second)
	var want []string
	for _, n := range c.nodes {
		if n != old && n != nu {
			want = append(want, n.id)
		}
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, func() bool { return slices.Equal(nu.beats.successors(), want) },
		"the new leader's beats name %v, want the inherited %v", nu.beats.successors(), want)
}

// A live leader whose beats stop arriving (lost, or late under load) still answers its term:
// the followers' probes get answers, so the probe path deposes nobody and only the heartbeat
// timeout does. Any answer, even a forged one, can only delay a takeover.
func TestProbe_AnsweringLeaderOnlyTakenOverBySuspicion(t *testing.T) {
	c := newProbeCluster(t, testenv.NATS(t), 2)
	old, _ := c.elected(1, 20*time.Second)
	time.Sleep(time.Second)

	muted := time.Now()
	old.beats.muted.Store(true)
	_, second := c.elected(2, 10*time.Second)

	if evs, _ := c.of(election.EventNoResponders); len(evs) != 0 {
		t.Fatalf("a leader that answers was confirmed gone: %v", evs)
	}
	s := c.stats()
	if s.ProbeAnswers == 0 || s.Suspicions == 0 {
		t.Errorf("stats %+v: want probes answered, then a suspicion", s)
	}
	// The silence is counted from the last beat heard, up to one interval before the mute.
	d := election.DefaultConfig()
	if took := second.At.Sub(muted); took < d.SuspicionTimeout-d.HeartbeatInterval {
		t.Errorf("replaced %v after its beats stopped, before the suspicion timeout (%v, beats every %v)", took, d.SuspicionTimeout, d.HeartbeatInterval)
	}
}

// A NATS server restart cuts every process off at once, leader included. The followers come
// back on a new session and do not count no-responders until they hear the leader again, so
// nobody is deposed.
func TestProbe_NATSRestartDeposesNobody(t *testing.T) {
	ports, err := devserver.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	s := startNATSOn(t, ports[0])
	c := newProbeCluster(t, s.ClientURL(), 3)
	c.elected(1, 20*time.Second)
	time.Sleep(time.Second)

	for range 2 {
		s.Shutdown()
		s.WaitForShutdown()
		time.Sleep(time.Second)
		s = startNATSOn(t, ports[0])
		time.Sleep(3 * time.Second)
	}
	if evs, _ := c.of(election.EventElected); len(evs) != 1 {
		t.Fatalf("%d elections across two NATS restarts, want 1", len(evs))
	}
	if st := c.stats(); st.NoResponders != 0 || st.Breaks != 0 {
		t.Errorf("stats %+v: a live leader was taken for dead", st)
	}
}

// A live leader whose own connection the server drops (the server stays up, the followers stay
// connected) reconnects within a blip and re-subscribes its term's answer before the followers'
// confirmation window ends: nobody is deposed.
func TestProbe_LeaderReconnectBlipDeposesNobody(t *testing.T) {
	ports, err := devserver.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	s := startNATSOn(t, ports[0])
	c := newProbeCluster(t, s.ClientURL(), 3)
	old, _ := c.elected(1, 20*time.Second)
	for i := range 5 {
		time.Sleep(time.Second + time.Duration(i)*50*time.Millisecond) // kicks at varied beat phases
		id, err := old.bus.Conn().GetClientID()
		if err != nil {
			t.Fatal(err)
		}
		kicked := time.Now()
		if err := s.DisconnectClientByID(id); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, 5*time.Second, time.Millisecond, func() bool {
			nid, err := old.bus.Conn().GetClientID()
			return err == nil && nid != id && old.bus.Conn().IsConnected()
		}, "the leader did not reconnect")
		t.Logf("leader reconnected %v after the kick", time.Since(kicked).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second)
	if evs, _ := c.of(election.EventElected); len(evs) != 1 {
		t.Fatalf("%d elections across 5 reconnects of the leader, want 1 (stats %+v)", len(evs), c.stats())
	}
}

// A nats-server process SIGKILLed and restarted 1s later, three times: every process loses its
// connection at once, the followers come back on a new session and wait for a beat before they
// count no-responders again, so the leader is never deposed.
func TestProbe_NATSProcessSIGKILLDeposesNobody(t *testing.T) {
	bin, err := devserver.NATSBin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	n, err := devserver.StartNATSProcess(bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	c := newProbeCluster(t, n.URL(), 3)
	c.elected(1, 20*time.Second)
	time.Sleep(time.Second)
	for range 3 {
		if err := n.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
		if err := n.Restart(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(3 * time.Second)
	}
	if evs, _ := c.of(election.EventElected); len(evs) != 1 {
		t.Fatalf("%d elections across three SIGKILLs of nats-server, want 1 (stats %+v)", len(evs), c.stats())
	}
	if st := c.stats(); st.NoResponders != 0 || st.Breaks != 0 {
		t.Errorf("stats %+v: a live leader was taken for dead", st)
	}
}

// A leader stopping gracefully stops beating when its leader context ends, then writes its final
// checkpoint while it still holds the lease. Its term answers probes until the lease is
// released, so no follower breaks the lease under that checkpoint.
func TestProbe_GracefulStopNotBrokenWhileCheckpointing(t *testing.T) {
	c := newProbeCluster(t, testenv.NATS(t), 3)
	old, first := c.elected(1, 20*time.Second)
	time.Sleep(time.Second)
	old.hold.Store(int64(time.Second)) // a slow final checkpoint, below the suspicion timeout
	old.stop()
	_, second := c.elected(2, 10*time.Second)
	if second.Term.Epoch != first.Term.Epoch+1 {
		t.Fatalf("second term %+v", second.Term)
	}
	rel, ids := c.of(election.EventReleased)
	if len(rel) != 1 || ids[0] != old.id {
		t.Fatalf("released by %v, want %s", ids, old.id)
	}
	// No break at all: not while the leader checkpoints, and not after its release either (the
	// released stamp tells a late follower that the holder is a successor that has not stamped).
	if broke, _ := c.of(election.EventBrokeLease); len(broke) != 0 {
		t.Errorf("stats %+v: %d lease breaks around a graceful stop, want none", c.stats(), len(broke))
	}
	// Once released the term is over and stops answering: probes may find it gone, and the
	// follower then finds the lease free.
	gone, _ := c.of(election.EventNoResponders)
	for _, ev := range gone {
		if ev.At.Before(rel[0].At) {
			t.Errorf("the term had no responders at %v, before its release at %v", ev.At, rel[0].At)
		}
	}
}

// A leader cut off from NATS without a FIN (its host gone, a silent partition) keeps its
// subscription on the server: probes of its term neither get answers nor "no responders", they
// time out. The probes (the watcher's, then the silence's) run beside the follower's wait loop,
// so even a probe that hangs for a minute does not hold up the heartbeat timeout: the follower
// suspects on time.
func TestProbe_HangingProbesDoNotDelaySuspicion(t *testing.T) {
	c := newProbeClusterWith(t, testenv.NATS(t), 2, probeOpts{proxied: true, probeTimeout: time.Minute})
	old, first := c.elected(1, 20*time.Second)
	time.Sleep(time.Second) // the follower hears the term

	cut := time.Now()
	old.link.Blackhole()
	_, second := c.elected(2, 20*time.Second)
	took := second.At.Sub(cut)
	if second.Term.Epoch != first.Term.Epoch+1 || second.Term.Identity == old.id {
		t.Fatalf("second term %+v after %+v", second.Term, first.Term)
	}
	suspected, _ := c.of(election.EventSuspected)
	if len(suspected) == 0 {
		t.Fatalf("no suspicion (stats %+v)", c.stats())
	}
	if st := c.stats(); st.Probes == 0 {
		t.Fatalf("stats %+v: no probe was out", st)
	}
	if evs, _ := c.of(election.EventNoResponders); len(evs) != 0 {
		t.Errorf("a cut-off leader whose subscription stays was confirmed gone: %v", evs)
	}
	// The bound is the behaviour: the suspicion timeout after the last beat (at most one beat
	// interval before the cut), plus the break and acquire, never the probe's minute.
	d := election.DefaultConfig()
	if limit := d.SuspicionTimeout + time.Second; took > limit {
		t.Errorf("cut -> new leader %v, want within %v (a hanging probe delayed the suspicion)", took.Round(time.Millisecond), limit)
	}
	t.Logf("cut -> suspected %v, new leader %v", suspected[0].At.Sub(cut).Round(time.Millisecond), took.Round(time.Millisecond))
}

// proxiedBlob is a blob client whose requests to the Azurite of connStr go through a fault proxy.
func proxiedBlob(t *testing.T, connStr string) (*azblob.Client, *faultproxy.Proxy) {
	t.Helper()
	var fields []string
	var proxy *faultproxy.Proxy
	for _, f := range strings.Split(connStr, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(f), "BlobEndpoint="); ok {
			u, err := neturl.Parse(v)
			if err != nil {
				t.Fatal(err)
			}
			if proxy, err = faultproxy.New(u.Host); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = proxy.Close() })
			u.Host = proxy.Addr()
			f = "BlobEndpoint=" + u.String()
		}
		fields = append(fields, f)
	}
	if proxy == nil {
		t.Fatal("the Azurite connection string has no BlobEndpoint")
	}
	client, err := azblob.NewClientFromConnectionString(strings.Join(fields, ";"), nil)
	if err != nil {
		t.Fatal(err)
	}
	return client, proxy
}

// A leader cut off from storage (its renewals hang) while NATS works pauses its beats once a
// renewal has stalled for RenewStall; a follower that reaches storage breaks its lease after the
// suspicion timeout, fenced, instead of waiting for the leader's safety deadline (13s).
func TestProbe_StorageCutLeaderPausesBeats(t *testing.T) {
	c := newProbeClusterWith(t, testenv.NATS(t), 3, probeOpts{storageProxied: true})
	old, first := c.elected(1, 20*time.Second)
	time.Sleep(time.Second)

	cut := time.Now()
	old.blob.Blackhole()
	defer old.blob.Heal()
	_, second := c.elected(2, 20*time.Second)
	took := second.At.Sub(cut)
	if second.Term.Epoch != first.Term.Epoch+1 || second.Term.Identity == old.id {
		t.Fatalf("second term %+v after %+v", second.Term, first.Term)
	}
	paused, ids := c.of(election.EventBeatsPaused)
	if len(paused) == 0 || ids[0] != old.id {
		t.Fatalf("beats paused by %v, want the cut leader %s", ids, old.id)
	}
	if broke, _ := c.of(election.EventBrokeLease); len(broke) != 1 {
		t.Errorf("%d lease breaks, want 1", len(broke))
	}
	// The bound is the behaviour: a renewal (every second) stalls, then the suspicion timeout.
	d := election.DefaultConfig()
	// The cut leader still answers probes, so the follower gives it AliveWait after its own read.
	if limit := d.RenewInterval + election.RenewStall + d.SuspicionTimeout + election.AliveWait + time.Second; took > limit {
		t.Errorf("storage cut -> new leader %v, want within %v", took.Round(time.Millisecond), limit)
	}
	t.Logf("storage cut -> beats paused %v, new leader %v", paused[0].At.Sub(cut).Round(time.Millisecond), took.Round(time.Millisecond))
}

// Storage that stops answering everyone for 2.5 s (longer than RenewStall + SuspicionTimeout: an
// emulator saving its metadata, a throttled account), three times, deposes nobody: the follower
// that suspects the silent leader reads the lease blob once storage answers, finds the leader
// answering probes, and hears its beats again within AliveWait, its queued renewal answered too.
func TestProbe_StoragePausedForEveryoneDeposesNobody(t *testing.T) {
	c := newProbeClusterWith(t, testenv.NATS(t), 3, probeOpts{storageProxied: true})
	c.elected(1, 20*time.Second)
	time.Sleep(time.Second)
	for range 3 {
		for _, n := range c.nodes {
			n.blob.Blackhole()
		}
		time.Sleep(2500 * time.Millisecond)
		for _, n := range c.nodes {
			n.blob.Heal()
		}
		time.Sleep(3 * time.Second)
	}
	if evs, _ := c.of(election.EventElected); len(evs) != 1 {
		t.Fatalf("%d elections across 3 pauses of all storage, want 1 (stats %+v)\n%s", len(evs), c.stats(), c.since(time.Time{}))
	}
	paused, _ := c.of(election.EventBeatsPaused)
	suspected, _ := c.of(election.EventSuspected)
	t.Logf("beats paused %d times, suspicions %d, in 3 pauses", len(paused), len(suspected))
}

// Storage blips of 1.2s (each below RenewStall + SuspicionTimeout, longer than a renew period,
// so a renewal stalls in most) may pause a leader's beats but depose nobody.
func TestProbe_StorageBlipsDeposeNobody(t *testing.T) {
	c := newProbeClusterWith(t, testenv.NATS(t), 3, probeOpts{storageProxied: true})
	old, _ := c.elected(1, 20*time.Second)
	time.Sleep(time.Second)
	for range 5 {
		old.blob.Blackhole()
		time.Sleep(1200 * time.Millisecond)
		old.blob.Heal()
		time.Sleep(1500 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if evs, _ := c.of(election.EventElected); len(evs) != 1 {
		t.Fatalf("%d elections across 5 storage blips of the leader, want 1 (stats %+v)", len(evs), c.stats())
	}
	paused, _ := c.of(election.EventBeatsPaused)
	t.Logf("beats paused %d times in 5 blips", len(paused))
}
