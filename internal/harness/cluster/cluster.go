// Package cluster runs a real local cluster of worker processes; clustertest is its public face.
//
// A cluster is Azurite, a NATS server with JetStream (in-process, or a nats-server process with
// Options.NATSBin) and N `worker run` processes, which it can kill with any signal and restart.
// It learns about elections and merges from the typed events the workers publish on NATS
// (package membership), never from their log text. It knows each worker's HTTP address from its
// membership announcements.
//
// Every server listens on 127.0.0.1 only. Worker and Azurite processes get a parent-death signal,
// so they stop by themselves if the owner dies; Stop stops them by process id.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Options configure a cluster. Zero fields take their defaults.
type Options struct {
	// Dir holds logs and server data. Required.
	Dir string
	// WorkerBin is the worker binary (see Build). Required.
	WorkerBin string
	// Workers is the number of worker processes. Default 3.
	Workers int
	// Namespace prefixes container, queue and stream names, so clusters can share one Azurite.
	// Default "" (the binary's defaults: jobs, jobs, leader, mapagg).
	Namespace string
	// LeaseDuration of the election. Default 15s.
	LeaseDuration time.Duration
	// Concurrency per worker. Default 2; negative leaves it to the worker binary's default (the
	// number of CPUs).
	Concurrency int
	// ShardTimeout (AckWait of shards). Default 30s; negative leaves it to the worker binary's
	// default.
	ShardTimeout time.Duration
	// MapDelay slows every map step (see worker.Config.MapDelay). Default 0.
	MapDelay time.Duration
	// MaxAttempts per shard. Default 3.
	MaxAttempts int
	// Env adds environment variables (KEY=VALUE) to every worker.
	Env []string
	// WorkerEnv adds environment variables to one worker (by id: w1, w2, …), after Env, so a
	// variable set here wins: e.g. a straggler's MAP_DELAY or the NATS_URL of one node of a NATS
	// cluster.
	WorkerEnv map[string][]string
	// ConnStr and NATSURL attach to running servers instead of starting them.
	ConnStr, NATSURL string
	// NATSBin, when set (and NATSURL is not), runs NATS as this nats-server binary in a child
	// process instead of in-process, so that it can be killed and restarted (see NATSProcess).
	NATSBin string
	// Registry has the job types Client validates before a submit. Default builtin.Registry().
	Registry *jobs.Registry
}

// Event is one election or coordinator event of a worker, as it published it on NATS.
type Event struct {
	Time   time.Time // when it happened, by the worker's clock
	Worker string
	Kind   string // an election.EventKind or coordinator.EventKind value (see the constants below)
	Epoch  uint64
	Job    string
	Shard  int
	Err    string
}

// The event kinds tools wait for.
const (
	Elected     = string(election.EventElected)
	TermStarted = string(coordinator.EventTermStarted)
	FirstMerge  = string(coordinator.EventFirstMerge)
	JobPlanned  = string(coordinator.EventJobPlanned)
	JobFinished = string(coordinator.EventJobFinished)
)

// Proc is one worker process.
type Proc struct {
	ID      string
	PID     int
	LogPath string
	Started time.Time
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// Signal sends sig to the process without waiting (SIGSTOP, SIGCONT; Cluster.Signal waits for
// an exit).
func (p *Proc) Signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// Exited is closed when the process has exited.
func (p *Proc) Exited() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Proc) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err is the process's exit error (after Exited).
func (p *Proc) Err() error { <-p.done; return p.err }

// Stop ends the process: SIGTERM, SIGKILL after 15 s.
func (p *Proc) Stop() { _ = p.end(syscall.SIGTERM, 15*time.Second) }

// end sends sig and waits for the exit. After within it kills the process and says so.
func (p *Proc) end(sig syscall.Signal, within time.Duration) error {
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal %s: %w", p.ID, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("worker %s did not exit within %v of %v", p.ID, within, sig)
	}
}

// Log is what the process wrote so far.
func (p *Proc) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	ConnStr string
	NATSURL string
	Client  *client.Client
	Bus     *bus.Bus

	az   *devserver.AzuriteServer
	ns   *server.Server
	np   *devserver.NATSProcess
	blob *azblob.Client

	eventsSub *nats.Subscription
	members   *membership.Watcher

	stopOnce sync.Once

	mu     sync.Mutex
	procs  map[string]*Proc
	all    []*Proc
	events []Event
	bad    int
	seq    int
}

// Names used by a cluster in its namespace.
func (o Options) names() (jobsContainer, queueName, leaseContainer, prefix string) {
	if o.Namespace == "" {
		return "jobs", "jobs", "leader", "mapagg"
	}
	return o.Namespace + "-jobs", o.Namespace + "-jobs", o.Namespace + "-leader", strings.ReplaceAll(o.Namespace, "-", "")
}

// Start starts the servers (unless attached) and the workers, and waits for a leader.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" || opts.WorkerBin == "" {
		return nil, errors.New("cluster: Dir and WorkerBin are required")
	}
	if opts.Workers == 0 {
		opts.Workers = 3
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 15 * time.Second
	}
	if opts.Concurrency == 0 {
		opts.Concurrency = 2
	}
	if opts.ShardTimeout == 0 {
		opts.ShardTimeout = 30 * time.Second
	}
	if opts.MaxAttempts == 0 {
		opts.MaxAttempts = 3
	}
	if opts.Registry == nil {
		opts.Registry = builtin.Registry()
	}
	c := &Cluster{opts: opts, procs: map[string]*Proc{}, ConnStr: opts.ConnStr, NATSURL: opts.NATSURL}
	ok := false
	defer func() {
		if !ok {
			c.Stop()
		}
	}()
	if c.ConnStr == "" {
		az, err := devserver.StartAzurite(filepath.Join(opts.Dir, "azurite"))
		if err != nil {
			return nil, err
		}
		c.az, c.ConnStr = az, az.ConnectionString()
	}
	if c.NATSURL == "" && opts.NATSBin != "" {
		np, err := devserver.StartNATSProcess(opts.NATSBin, filepath.Join(opts.Dir, "nats"))
		if err != nil {
			return nil, err
		}
		c.np, c.NATSURL = np, np.URL()
	}
	if c.NATSURL == "" {
		ns, err := devserver.StartNATS(filepath.Join(opts.Dir, "nats"))
		if err != nil {
			return nil, err
		}
		c.ns, c.NATSURL = ns, ns.ClientURL()
	}
	var err error
	if c.blob, err = store.NewClient(c.ConnStr); err != nil {
		return nil, err
	}
	jc, qn, _, prefix := opts.names()
	q, err := queue.New(c.ConnStr, qn)
	if err != nil {
		return nil, err
	}
	jobsC := store.New(c.blob, jc)
	if err := jobsC.Ensure(ctx); err != nil {
		return nil, err
	}
	if err := q.Ensure(ctx); err != nil {
		return nil, err
	}
	if c.Bus, err = bus.Connect(c.NATSURL, "cluster-harness", bus.Config{Prefix: prefix}); err != nil {
		return nil, err
	}
	c.Client = &client.Client{Store: jobsC, Queue: q, Notify: c.Bus, Registry: opts.Registry}
	names := protocol.NewNames(prefix)
	if c.eventsSub, err = c.Bus.Conn().Subscribe(names.Events(), c.onEvent); err != nil {
		return nil, fmt.Errorf("subscribe to worker events: %w", err)
	}
	if c.members, err = membership.Watch(c.Bus.Conn(), names.Members(), 0, nil); err != nil {
		return nil, fmt.Errorf("watch membership: %w", err)
	}
	if err := c.Bus.Conn().Flush(); err != nil {
		return nil, err
	}
	for i := 1; i <= opts.Workers; i++ {
		if _, err := c.StartWorker(fmt.Sprintf("w%d", i)); err != nil {
			return nil, err
		}
	}
	if _, err := c.WaitLeader(ctx, func(*election.LeaderInfo) bool { return true }); err != nil {
		return nil, fmt.Errorf("no leader elected: %w", err)
	}
	ok = true
	return c, nil
}

// Azurite is the Azurite the cluster started (nil when attached), for fault injection.
func (c *Cluster) Azurite() *devserver.AzuriteServer { return c.az }

// NATSProcess is the nats-server process the cluster started (nil unless Options.NATSBin).
func (c *Cluster) NATSProcess() *devserver.NATSProcess { return c.np }

// Names are the cluster's stream and subject names.
func (c *Cluster) Names() protocol.Names {
	_, _, _, prefix := c.opts.names()
	return protocol.NewNames(prefix)
}

// JobsContainer is the name of the cluster's jobs container.
func (c *Cluster) JobsContainer() string {
	jc, _, _, _ := c.opts.names()
	return jc
}

// QueueName is the name of the cluster's job queue.
func (c *Cluster) QueueName() string {
	_, qn, _, _ := c.opts.names()
	return qn
}

// Blob is the cluster's blob service client.
func (c *Cluster) Blob() *azblob.Client { return c.blob }

// Options returns the effective options.
func (c *Cluster) Options() Options { return c.opts }

// WorkerEnv is the environment a worker of this cluster runs with.
func (c *Cluster) WorkerEnv(id string) []string {
	jc, qn, lc, prefix := c.opts.names()
	env := append(os.Environ(),
		"AZURE_STORAGE_CONNECTION_STRING="+c.ConnStr, "NATS_URL="+c.NATSURL, "WORKER_ID="+id,
		"JOBS_CONTAINER="+jc, "JOBS_QUEUE="+qn, "LEASE_CONTAINER="+lc, "STREAM_PREFIX="+prefix,
		"LEASE_DURATION="+c.opts.LeaseDuration.String(), "MAP_DELAY="+c.opts.MapDelay.String(),
		"MAX_ATTEMPTS="+fmt.Sprint(c.opts.MaxAttempts), "LOG_LEVEL=info", "HTTP_ADDR=127.0.0.1:0")
	if c.opts.Concurrency > 0 {
		env = append(env, "WORKER_CONCURRENCY="+fmt.Sprint(c.opts.Concurrency))
	}
	if c.opts.ShardTimeout > 0 {
		env = append(env, "SHARD_TIMEOUT="+c.opts.ShardTimeout.String())
	}
	env = append(env, c.opts.Env...)
	// exec keeps the last value of a variable given twice.
	return append(env, c.opts.WorkerEnv[id]...)
}

// StartWorker starts a worker process with the given id (a restart reuses the id).
func (c *Cluster) StartWorker(id string) (*Proc, error) {
	c.mu.Lock()
	if p, ok := c.procs[id]; ok {
		select {
		case <-p.done:
		default:
			c.mu.Unlock()
			return nil, fmt.Errorf("worker %s is running", id)
		}
	}
	c.mu.Unlock()
	return c.start(id, "", true)
}

// StartExtra starts worker id outside the cluster's set, with env after the cluster's (so env
// wins): behind a fault proxy, or misconfigured. Running and Proc do not list it; Stop stops it.
func (c *Cluster) StartExtra(id string, env ...string) (*Proc, error) {
	return c.start(id, ".extra", false, env...)
}

func (c *Cluster) start(id, suffix string, member bool, env ...string) (*Proc, error) {
	c.mu.Lock()
	c.seq++
	logPath := filepath.Join(c.opts.Dir, fmt.Sprintf("%s.%d%s.log", id, c.seq, suffix))
	c.mu.Unlock()

	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(c.opts.WorkerBin, "run")
	cmd.Env = append(c.WorkerEnv(id), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	p := &Proc{ID: id, PID: cmd.Process.Pid, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	c.mu.Lock()
	if member {
		c.procs[id] = p
	}
	c.all = append(c.all, p)
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) onEvent(m *nats.Msg) {
	e, err := membership.DecodeEvent(m.Data)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.bad++
		return
	}
	c.events = append(c.events, Event{Time: e.At, Worker: e.Worker, Kind: e.Kind, Epoch: e.Epoch, Job: e.Job, Shard: e.Shard, Err: e.Err})
}

// Members lists the workers that announced themselves within the last three seconds.
func (c *Cluster) Members() []membership.Member { return c.members.Live() }

// HTTPAddr returns the address of worker id's HTTP server, as it last announced it ("" when it
// has not announced itself yet, or is gone).
func (c *Cluster) HTTPAddr(id string) string {
	for _, m := range c.members.Live() {
		if m.ID == id {
			return m.HTTPAddr
		}
	}
	return ""
}

// Proc returns the process of worker id (the latest, if restarted).
func (c *Cluster) Proc(id string) *Proc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[id]
}

// Running lists the ids of workers still running, sorted.
func (c *Cluster) Running() []string { return c.list(false) }

// Exited lists the workers whose latest process has exited, with how it ended, sorted.
func (c *Cluster) Exited() []string { return c.list(true) }

func (c *Cluster) list(exited bool) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id, p := range c.procs {
		select {
		case <-p.done:
			if exited {
				out = append(out, fmt.Sprintf("%s (%v)", id, p.err))
			}
		default:
			if !exited {
				out = append(out, id)
			}
		}
	}
	sort.Strings(out)
	return out
}

// Signal sends sig to worker id and waits for it to exit (SIGKILL after 30s).
func (c *Cluster) Signal(id string, sig syscall.Signal) (time.Time, error) {
	p := c.Proc(id)
	if p == nil {
		return time.Time{}, fmt.Errorf("no worker %s", id)
	}
	at := time.Now()
	return at, p.end(sig, 30*time.Second)
}

// Leader reads who holds the lease (nil when nobody does).
func (c *Cluster) Leader(ctx context.Context) (*election.LeaderInfo, error) {
	_, _, lc, _ := c.opts.names()
	return election.ReadLeader(ctx, c.blob, lc, "lease")
}

// WaitLeader polls until a leader satisfying ok holds the lease, or ctx ends.
func (c *Cluster) WaitLeader(ctx context.Context, ok func(*election.LeaderInfo) bool) (*election.LeaderInfo, error) {
	for {
		l, err := c.Leader(ctx)
		if err == nil && l != nil && ok(l) {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for a leader: %w (last read error: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Events returns the workers' events so far, in arrival order.
func (c *Cluster) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Event(nil), c.events...)
}

// EventAfter returns the first event of kind after t.
func (c *Cluster) EventAfter(kind string, t time.Time) (Event, bool) {
	for _, e := range c.Events() {
		if e.Kind == kind && e.Time.After(t) {
			return e, true
		}
	}
	return Event{}, false
}

// WaitEvent polls the events until one satisfies ok, or ctx ends.
func (c *Cluster) WaitEvent(ctx context.Context, ok func(Event) bool) (Event, error) {
	for {
		for _, e := range c.Events() {
			if ok(e) {
				return e, nil
			}
		}
		select {
		case <-ctx.Done():
			return Event{}, fmt.Errorf("waiting for a worker event: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop stops every worker (SIGTERM, then SIGKILL after 10s) and the servers it started.
// It is safe to call more than once.
func (c *Cluster) Stop() { c.stopOnce.Do(c.stop) }

func (c *Cluster) stop() {
	c.mu.Lock()
	procs := append([]*Proc(nil), c.all...)
	c.mu.Unlock()
	for _, p := range procs {
		select {
		case <-p.done:
			continue
		default:
		}
		_ = p.cmd.Process.Signal(syscall.SIGCONT) // a stopped process would not act on SIGTERM
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	if c.members != nil {
		c.members.Stop()
	}
	if c.eventsSub != nil {
		_ = c.eventsSub.Unsubscribe()
	}
	if c.Bus != nil {
		c.Bus.Close()
	}
	if c.ns != nil {
		c.ns.Shutdown()
		c.ns.WaitForShutdown()
	}
	if c.np != nil {
		c.np.Stop()
	}
	if c.az != nil {
		c.az.Stop()
	}
}

// Build compiles the stock worker binary (./cmd/worker of this module) into dir, with the race
// detector when race is set, and returns its path.
func Build(dir string, race bool) (string, error) {
	root, err := devserver.RepoRoot()
	if err != nil {
		return "", err
	}
	return BuildPackage(dir, root, "./cmd/worker", race)
}

// BuildPackage compiles the main package pkg, as `go build` in folder from takes it, into dir.
// It returns the binary's path.
func BuildPackage(dir, from, pkg string, race bool) (string, error) {
	out := filepath.Join(dir, "worker")
	if base := filepath.Base(strings.TrimSuffix(pkg, "/")); base != "." && base != ".." {
		out = filepath.Join(dir, base)
	}
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Dir = from
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}
