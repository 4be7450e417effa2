package sim

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// Options configure a simulated cluster.
type Options struct {
	Dir           string // host logs; required
	HostBin       string // the simhost binary (BuildHost); required
	ConnStr       string // storage (Azurite); required
	NATSURL       string // the NATS server; required
	Namespace     string // names its containers, queue and streams (NamesFor); required
	LeaseDuration time.Duration
	// Solo is how many members (the first by id) run in a process of their own: the leader and
	// its named successors are always among them (successors are named in id order), so the
	// leader's CPU and memory are its process's, and a takeover is done by a member as loaded as
	// a worker process. Default 3.
	Solo int
	// PerHost is how many of the other members share a process. Default 100.
	PerHost int
	// Logf prints progress.
	Logf func(format string, args ...any)
}

// hostProc is one simhost process.
type hostProc struct {
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	members int
	done    chan struct{}
	mu      sync.Mutex // one command at a time
}

// do sends a command and reads its one-line answer ("ok ..." → the rest; "err ..." → error).
func (h *hostProc) do(cmd string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := fmt.Fprintln(h.in, cmd); err != nil {
		return "", fmt.Errorf("host %d: %w", h.cmd.Process.Pid, err)
	}
	line, err := h.out.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("host %d: %s: %w", h.cmd.Process.Pid, strings.Fields(cmd)[0], err)
	}
	line = strings.TrimSpace(line)
	if rest, ok := strings.CutPrefix(line, "ok"); ok {
		return strings.TrimSpace(rest), nil
	}
	return "", fmt.Errorf("host %d: %s", h.cmd.Process.Pid, line)
}

// PID is the host process's id.
func (h *hostProc) PID() int { return h.cmd.Process.Pid }

// Cluster is a simulated cluster of members in host processes.
type Cluster struct {
	opts   Options
	names  Names
	keys   string
	Bus    *bus.Bus       // the harness's own connection (events; submits' pokes)
	Client *client.Client // submits, statuses and results (its storage requests are Submits')
	// Submits counts the storage requests of Client.
	Submits *storecount.Counting

	mu     sync.Mutex
	hosts  []*hostProc
	where  map[string]*hostProc
	ids    []string
	events []membership.Event
	sub    *nats.Subscription
}

// MemberID names member i (from 0): ids sort in start order.
func MemberID(i int) string { return fmt.Sprintf("m%05d", i) }

// Start prepares an empty cluster: the containers, the queue, the harness's connection and
// the events subscription. Grow adds members.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" || opts.HostBin == "" || opts.ConnStr == "" || opts.NATSURL == "" || opts.Namespace == "" {
		return nil, errors.New("sim: Dir, HostBin, ConnStr, NATSURL and Namespace are required")
	}
	opts.Solo, opts.PerHost = cmp.Or(opts.Solo, 3), cmp.Or(opts.PerHost, 100)
	opts.LeaseDuration = cmp.Or(opts.LeaseDuration, 15*time.Second)
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	c := &Cluster{opts: opts, names: NamesFor(opts.Namespace), keys: base64.StdEncoding.EncodeToString(secret[:]), where: map[string]*hostProc{}}
	c.Submits = storecount.NewCounting(nil)
	clients, err := store.Account{ConnectionString: opts.ConnStr, Transport: c.Submits}.Open()
	if err != nil {
		return nil, err
	}
	jobsC := store.New(clients.Blob, c.names.JobsContainer)
	if err := jobsC.Ensure(ctx); err != nil {
		return nil, err
	}
	q, err := queue.Open(clients, c.names.Queue)
	if err != nil {
		return nil, err
	}
	if err := q.Ensure(ctx); err != nil {
		return nil, err
	}
	if c.Bus, err = bus.Connect(opts.NATSURL, "sim-harness", bus.Config{Prefix: c.names.StreamPrefix}); err != nil {
		return nil, err
	}
	c.Client = &client.Client{Store: jobsC, Queue: q, Notify: c.Bus, Registry: builtin.Registry()}
	names := protocol.NewNames(c.names.StreamPrefix)
	if c.sub, err = c.Bus.Conn().Subscribe(names.Events(), c.onEvent); err != nil {
		c.Bus.Close()
		return nil, err
	}
	c.Submits.Reset() // the set-up above is not a submit's
	return c, nil
}

func (c *Cluster) onEvent(m *nats.Msg) {
	e, err := membership.DecodeEvent(m.Data)
	if err != nil {
		return
	}
	c.mu.Lock()
	c.events = append(c.events, *e)
	c.mu.Unlock()
}

// Names are the cluster's container, queue and stream names.
func (c *Cluster) Names() Names { return c.names }

// Size is the number of members started.
func (c *Cluster) Size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// newHost starts a simhost process.
func (c *Cluster) newHost() (*hostProc, error) {
	c.mu.Lock()
	n := len(c.hosts)
	c.mu.Unlock()
	logf, err := os.Create(filepath.Join(c.opts.Dir, fmt.Sprintf("host%03d.log", n)))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.opts.HostBin)
	cmd.Env = append(os.Environ(), "SIM_STORAGE="+c.opts.ConnStr, "SIM_NATS_URL="+c.opts.NATSURL, "SIM_NAMESPACE="+c.opts.Namespace,
		"SIM_LEASE_DURATION="+c.opts.LeaseDuration.String(), "SIM_CLUSTER_KEY="+c.keys,
		"GOMEMLIMIT=off") // many members share one process: no member's budget is the process's
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start simhost: %w", err)
	}
	h := &hostProc{cmd: cmd, in: in, out: bufio.NewReader(out), done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(h.done) }()
	c.mu.Lock()
	c.hosts = append(c.hosts, h)
	c.mu.Unlock()
	return h, nil
}

// Grow starts members until the cluster has n, and waits until all of them announce
// themselves and a leader is elected. The first Solo members get a process each; the others
// fill processes of PerHost.
func (c *Cluster) Grow(ctx context.Context, n int) error {
	watch, err := membership.Watch(c.Bus.Conn(), protocol.NewNames(c.names.StreamPrefix).Members(), 0, nil)
	if err != nil {
		return err
	}
	defer watch.Stop()
	const batch = 20 // members a host starts at once: start-up is a burst of storage and stream calls
	for c.Size() < n {
		i := c.Size()
		var h *hostProc
		c.mu.Lock()
		if i >= c.opts.Solo && len(c.hosts) > c.opts.Solo && c.hosts[len(c.hosts)-1].members < c.opts.PerHost {
			h = c.hosts[len(c.hosts)-1]
		}
		c.mu.Unlock()
		if h == nil {
			if h, err = c.newHost(); err != nil {
				return err
			}
		}
		k := 1
		if i >= c.opts.Solo {
			k = min(batch, c.opts.PerHost-h.members, n-i)
		}
		ids := make([]string, k)
		for j := range ids {
			ids[j] = MemberID(i + j)
		}
		if _, err := h.do("start " + strings.Join(ids, " ")); err != nil {
			return err
		}
		c.mu.Lock()
		h.members += k
		for _, id := range ids {
			c.where[id] = h
		}
		c.ids = append(c.ids, ids...)
		c.mu.Unlock()
		if err := c.waitLive(ctx, watch, c.Size(), time.Minute); err != nil {
			return err
		}
	}
	_, err = c.WaitLeader(ctx, 0, time.Minute)
	return err
}

// waitLive waits until n members announce themselves.
func (c *Cluster) waitLive(ctx context.Context, w *membership.Watcher, n int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		live := len(w.Peek())
		if live >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sim: %d of %d members announced themselves within %v (host logs in %s)", live, n, within, c.opts.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Events are the members' events so far.
func (c *Cluster) Events() []membership.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]membership.Event(nil), c.events...)
}

// Leader is the member elected last (the highest epoch of an elected event), if any.
func (c *Cluster) Leader() (membership.Event, bool) {
	var best membership.Event
	ok := false
	for _, e := range c.Events() {
		if e.Kind == string(election.EventElected) && (!ok || e.Epoch > best.Epoch) {
			best, ok = e, true
		}
	}
	return best, ok
}

// WaitLeader waits for an elected event of an epoch above after.
func (c *Cluster) WaitLeader(ctx context.Context, after uint64, within time.Duration) (membership.Event, error) {
	deadline := time.Now().Add(within)
	for {
		if l, ok := c.Leader(); ok && l.Epoch > after {
			return l, nil
		}
		if time.Now().After(deadline) {
			return membership.Event{}, fmt.Errorf("sim: no leader of an epoch above %d within %v", after, within)
		}
		select {
		case <-ctx.Done():
			return membership.Event{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Takeover is one crash of the leader and the election after it.
type Takeover struct {
	Members int     `json:"members"`
	Victim  string  `json:"victim"`
	S       float64 `json:"s"`      // crash to the next elected event
	Breaks  int     `json:"breaks"` // lease breaks reported meanwhile
}

// CrashLeader crashes the leader, times the next election and restarts the victim (the cluster
// keeps its size). It waits until the victim announces itself again.
func (c *Cluster) CrashLeader(ctx context.Context, within time.Duration) (Takeover, error) {
	l, ok := c.Leader()
	if !ok {
		return Takeover{}, errors.New("sim: no leader to crash")
	}
	c.mu.Lock()
	h := c.where[l.Worker]
	c.mu.Unlock()
	if h == nil {
		return Takeover{}, fmt.Errorf("sim: leader %s is not a member of this cluster", l.Worker)
	}
	ns, err := h.do("crash " + l.Worker)
	if err != nil {
		return Takeover{}, err
	}
	nanos, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return Takeover{}, fmt.Errorf("sim: crash answer %q", ns)
	}
	at := time.Unix(0, nanos)
	next, err := c.WaitLeader(ctx, l.Epoch, within)
	if err != nil {
		return Takeover{}, fmt.Errorf("after the crash of %s: %w", l.Worker, err)
	}
	time.Sleep(300 * time.Millisecond) // late breaks, if any, are counted
	t := Takeover{Members: c.Size(), Victim: l.Worker, S: next.At.Sub(at).Seconds()}
	for _, e := range c.Events() {
		if e.Kind == string(election.EventBrokeLease) && !e.At.Before(at) {
			t.Breaks++
		}
	}
	watch, err := membership.Watch(c.Bus.Conn(), protocol.NewNames(c.names.StreamPrefix).Members(), 0, nil)
	if err != nil {
		return t, err
	}
	defer watch.Stop()
	if _, err := h.do("start " + l.Worker); err != nil {
		return t, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, m := range watch.Peek() {
			if m.ID == l.Worker && m.StartedAt.After(at) && len(m.Problems) == 0 {
				return t, nil
			}
		}
		if time.Now().After(deadline) {
			return t, fmt.Errorf("sim: %s not back and ready within 30s of its restart", l.Worker)
		}
		select {
		case <-ctx.Done():
			return t, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Counts are the storage requests of every member so far.
func (c *Cluster) Counts() (storecount.Counts, error) {
	c.mu.Lock()
	hosts := append([]*hostProc(nil), c.hosts...)
	c.mu.Unlock()
	out := storecount.Counts{}
	for _, h := range hosts {
		s, err := h.do("counts")
		if err != nil {
			return nil, err
		}
		var list []Counted
		if err := json.Unmarshal([]byte(s), &list); err != nil {
			return nil, fmt.Errorf("sim: counts of host %d: %w", h.PID(), err)
		}
		for _, r := range list {
			out[r.Request] += r.N
		}
	}
	return out, nil
}

// LeaseBlob keeps the requests to the cluster's lease blob.
func (c *Cluster) LeaseBlob(r storecount.Request) bool {
	return r.Service == "blob" && r.Container == c.names.LeaseContainer && r.Blob == election.DefaultConfig().Blob
}

// HostPIDs are the host processes' ids, and HostOf the process of member id.
func (c *Cluster) HostPIDs() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]int, 0, len(c.hosts))
	for _, h := range c.hosts {
		out = append(out, h.PID())
	}
	return out
}

// HostOf is the process id of member id's host (0 if unknown), and how many members it runs.
func (c *Cluster) HostOf(id string) (pid, members int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h := c.where[id]; h != nil {
		return h.PID(), h.members
	}
	return 0, 0
}

// Stop stops every member gracefully (SIGKILL to a host after 30 s) and the harness's connection.
func (c *Cluster) Stop() {
	c.mu.Lock()
	hosts := append([]*hostProc(nil), c.hosts...)
	c.mu.Unlock()
	for _, h := range hosts {
		_ = h.in.Close() // end of commands: the host stops its members and exits
	}
	for _, h := range hosts {
		select {
		case <-h.done:
		case <-time.After(30 * time.Second):
			_ = h.cmd.Process.Kill()
			<-h.done
		}
	}
	if c.sub != nil {
		_ = c.sub.Unsubscribe()
	}
	if c.Bus != nil {
		c.Bus.Close()
	}
}

// BuildHost compiles cmd simhost into dir and returns its path.
func BuildHost(dir string) (string, error) {
	root, err := devserver.RepoRoot()
	if err != nil {
		return "", err
	}
	return cluster.BuildPackage(dir, root, "./internal/harness/sim/simhost", false)
}
