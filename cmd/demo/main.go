// Command demo is `make demo`: one leader failover, narrated.
//
// It runs a real cluster on this machine (Azurite, an in-process NATS server, three `worker run`
// processes) and submits a primes job. Half-way it kills the leader with SIGKILL and shows the
// fast takeover: a follower misses a heartbeat, finds the leader's term has no responders (its
// process is gone), breaks the lease fenced on its epoch and is elected, well under a second
// without a leader instead of the 15 s lease. It checks the result is exact.
//
// It stops every process it started and closes every port it opened: on success, on failure and
// on Ctrl-C. Its files (worker binary, server data, one log per worker process) are under .demo/
// in the repository; the logs of the last run stay there for reading.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/jobs"
)

// The job: count the primes below 2·10^7. π(2·10^7) = 1,270,607 is a published value, so the
// demo can say "exact" rather than "finished".
const (
	jobParams = `{"from":0,"to":20000000,"shards":200}`
	wantCount = 1270607
)

// errInterrupted is Ctrl-C or SIGTERM; errLeftBehind is a process or port that outlived the stop.
var (
	errInterrupted = errors.New("interrupted")
	errLeftBehind  = errors.New("left behind")
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case err == nil:
	case errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errInterrupted):
		fmt.Fprintln(os.Stderr, "demo: interrupted; everything it started is stopped")
		os.Exit(130)
	default:
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(1)
	}
}

type options struct {
	dir      string
	workers  int
	mapDelay time.Duration
	timeout  time.Duration
}

func parseFlags(args []string, out io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.dir, "dir", "", "folder for the binary, server data and logs (default .demo in the repository)")
	fs.IntVar(&o.workers, "workers", 3, "worker processes (at least 2: one dies)")
	fs.DurationVar(&o.mapDelay, "map-delay", 300*time.Millisecond, "extra time per shard, so the job lasts long enough to kill its leader half-way")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if o.workers < 2 {
		return o, fmt.Errorf("-workers %d: need at least 2, one of them is killed", o.workers)
	}
	return o, nil
}

func run(ctx context.Context, args []string, out io.Writer) (err error) {
	o, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	if o.dir == "" {
		root, err := devserver.RepoRoot()
		if err != nil {
			return err
		}
		o.dir = filepath.Join(root, ".demo")
	}
	// Whatever went wrong, say it was Ctrl-C when it was (main's ctx ends only on a signal).
	interrupted := ctx
	defer func() {
		switch {
		case err == nil:
		case interrupted.Err() != nil && !errors.Is(err, errLeftBehind):
			err = errInterrupted
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("gave up after %v (-timeout); the worker logs are in %s: %w", o.timeout, rel(filepath.Join(o.dir, "run")), err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	d := newDisplay(out)
	d.line("mapagg demo: %d workers count the primes below 20,000,000; the leader dies half-way.", o.workers)

	start := time.Now()
	d.step("building the worker")
	bin, err := cluster.Build(filepath.Join(o.dir, "bin"), false)
	if err != nil {
		return err
	}
	d.done(time.Since(start))

	// A fresh cluster every run: old data would hold old jobs and an old lease.
	runDir := filepath.Join(o.dir, "run")
	if err := os.RemoveAll(runDir); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(runDir, "azurite"), 0o755); err != nil {
		return err
	}
	start = time.Now()
	d.step("starting Azurite, NATS with JetStream and %d workers", o.workers)
	c, err := cluster.Start(ctx, cluster.Options{
		Dir: runDir, WorkerBin: bin, Workers: o.workers, MapDelay: o.mapDelay,
		// The worker's own shard timeout (5 s) and heartbeat settings: the demo shows the defaults.
		ShardTimeout: -1,
	})
	if err != nil {
		return fmt.Errorf("start cluster (logs in %s): %w", runDir, err)
	}
	defer func() {
		if serr := stopAll(c, d); serr != nil {
			err = errors.Join(serr, err)
		}
	}()
	d.done(time.Since(start))
	d.line("  storage %s, NATS %s, logs in %s", storageHosts(c.ConnStr), strings.TrimPrefix(c.NATSURL, "nats://"), rel(runDir))

	first, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	if first == nil {
		return errors.New("the cluster started but nobody holds the lease")
	}
	d.line("▸ %s is leader (epoch %d)", first.ID, first.Epoch)
	if addr, by := dashboard(ctx, c, first.ID); addr != "" {
		d.line("▸ dashboard: http://%s/ (served by %s, which outlives the kill; every worker serves one)", addr, by)
	}

	id, err := c.Client.Submit(ctx, "primes", json.RawMessage(jobParams))
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	d.line("▸ submitted %s: primes in [0, 20000000), 200 shards, each slowed by %v (-map-delay)", id, o.mapDelay)

	f, err := follow(ctx, c, d, id)
	if err != nil {
		return err
	}
	return report(d, f, o)
}

// failover is what happened to one job.
type failover struct {
	status    *client.Status
	took      time.Duration
	killed    *election.LeaderInfo // the leader killed; nil if the job ended first
	killedAt  time.Time
	doneAt    int            // shards merged when it was killed
	suspected *cluster.Event // the first follower to miss the killed leader's heartbeats
	noResp    *cluster.Event // the fast path: its term had no responders (the process is gone)
	broke     *cluster.Event // the fenced lease break that ended its term
	elected   *cluster.Event
	firstMrg  *cluster.Event
	restarted bool
}

// follow polls the job until it ends, kills the leader half-way, waits for the next election
// and restarts the killed worker.
func follow(ctx context.Context, c *cluster.Cluster, d *display, id string) (*failover, error) {
	f := &failover{}
	start := time.Now()
	leader := ""
	for {
		st, err := c.Client.Status(ctx, id)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			f.status = st
			desc := "leader " + leader
			switch {
			case f.killed != nil && f.elected == nil:
				desc = "no leader"
			case leader == "":
				desc = "waiting for the leader"
			}
			d.progress(st.ShardsDone, st.ShardsTotal, desc)
			if st.State.Terminal() {
				f.took = time.Since(start)
				d.finish()
				if st.State == jobs.StateSucceeded { // status is metadata only: read the result
					if st.Result, err = c.Client.Result(ctx, id); err != nil {
						return nil, err
					}
				}
				return f, nil
			}
			if f.killed == nil && st.ShardsTotal > 0 && 2*st.ShardsDone >= st.ShardsTotal {
				if err := kill(ctx, c, d, f, st.ShardsDone); err != nil {
					return nil, err
				}
			}
		}
		if leader == "" || f.killed != nil && f.elected == nil {
			if l, err := c.Leader(ctx); err == nil && l != nil && (f.killed == nil || l.ID != f.killed.ID) {
				leader = fmt.Sprintf("%s (epoch %d)", l.ID, l.Epoch)
			}
		}
		if f.killed != nil && f.noResp == nil && f.suspected == nil {
			if ev, ok := c.EventAfter(string(election.EventNoResponders), f.killedAt); ok {
				f.noResp, f.suspected = &ev, &ev
				d.note("▸ %s missed a heartbeat and probed %s's term: no responders (the process is gone), %.2f s after the kill — no need to wait for the suspicion timeout", ev.Worker, f.killed.ID, ev.Time.Sub(f.killedAt).Seconds())
			}
		}
		if f.killed != nil && f.suspected == nil {
			if ev, ok := c.EventAfter(string(election.EventSuspected), f.killedAt); ok {
				f.suspected = &ev
				d.note("▸ %s suspects %s: no heartbeat for the suspicion timeout (%.1f s after the kill)", ev.Worker, f.killed.ID, ev.Time.Sub(f.killedAt).Seconds())
			}
		}
		if f.killed != nil && f.broke == nil {
			if ev, ok := c.EventAfter(string(election.EventBrokeLease), f.killedAt); ok {
				f.broke = &ev
				d.note("▸ %s broke the lease of epoch %d (a conditional break on its ETag: only that term)", ev.Worker, f.killed.Epoch)
			}
		}
		if f.killed != nil && f.elected == nil {
			if ev, ok := c.EventAfter(cluster.Elected, f.killedAt); ok {
				f.elected = &ev
				leader = fmt.Sprintf("%s (epoch %d)", ev.Worker, ev.Epoch)
				d.note("▸ %s elected (epoch %d) %.1f s after the kill", ev.Worker, ev.Epoch, ev.Time.Sub(f.killedAt).Seconds())
				if _, err := c.StartWorker(f.killed.ID); err != nil {
					d.note("  could not restart %s: %v", f.killed.ID, err)
				} else {
					f.restarted = true
					d.note("▸ %s restarted; it joins as a follower", f.killed.ID)
				}
			}
		}
		if f.elected != nil && f.firstMrg == nil {
			for _, ev := range c.Events() {
				if ev.Kind == cluster.FirstMerge && ev.Worker == f.elected.Worker && !ev.Time.Before(f.elected.Time) {
					f.firstMrg = &ev
					break
				}
			}
		}
		select {
		case <-ctx.Done():
			d.finish()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// kill SIGKILLs the current leader: no checkpoint, no release, no more heartbeats.
func kill(ctx context.Context, c *cluster.Cluster, d *display, f *failover, done int) error {
	l, err := c.Leader(ctx)
	if err != nil || l == nil {
		return nil // between leaders; try again at the next poll
	}
	d.note("▸ %d of %d shards merged: killing the leader %s (epoch %d) with SIGKILL", done, f.status.ShardsTotal, l.ID, l.Epoch)
	at, err := c.Signal(l.ID, syscall.SIGKILL)
	if err != nil {
		return fmt.Errorf("kill the leader: %w", err)
	}
	f.killed, f.killedAt, f.doneAt = l, at, done
	d.note("  its heartbeats stop and NATS drops its subscriptions; the followers probe its term and need not wait out the suspicion timeout (1.5 s), let alone the 15 s lease; the workers keep mapping")
	return nil
}

// report prints the outcome and says whether the result is exact.
func report(d *display, f *failover, o options) error {
	st := f.status
	if st.State != jobs.StateSucceeded {
		return fmt.Errorf("job %s %s: %s", st.ID, st.State, st.Error)
	}
	var res builtin.PrimesResult
	if err := json.Unmarshal(st.Result, &res); err != nil {
		return fmt.Errorf("result %s: %w", st.Result, err)
	}
	d.line("")
	d.line("  job               %s succeeded in %.1f s", st.ID, f.took.Seconds())
	if f.killed != nil {
		d.line("  old leader        %s, epoch %d: killed with SIGKILL at %d/%d shards", f.killed.ID, f.killed.Epoch, f.doneAt, st.ShardsTotal)
	}
	if f.elected != nil {
		d.line("  new leader        %s, epoch %d", f.elected.Worker, f.elected.Epoch)
		how := "heartbeats missed, then a fenced lease break"
		if f.noResp != nil {
			how = "a heartbeat missed, its term had no responders, then a fenced lease break"
		}
		if f.broke == nil {
			how = "no lease break seen: the lease ran out"
		}
		d.line("  without a leader  %.1f s (kill → elected; %s; the lease is 15 s)", f.elected.Time.Sub(f.killedAt).Seconds(), how)
		if f.firstMrg != nil {
			d.line("  first merge       %s after the election (results waited on JetStream)", f.firstMrg.Time.Sub(f.elected.Time).Round(time.Millisecond))
		}
	}
	d.line("  duplicates        %d results dropped because their shard was already merged", st.Duplicates)
	d.line("  result            %s", st.Result)
	if res.Count != wantCount {
		return fmt.Errorf("wrong result: %d primes below 20,000,000, want %d", res.Count, wantCount)
	}
	d.line("                    exact: π(2·10^7) = 1,270,607")
	if f.killed == nil {
		d.line("  (the job ended before half of it was seen; try a larger -map-delay than %v to see a takeover)", o.mapDelay)
	}
	return nil
}

// stopAll stops the workers and servers, then checks that nothing still listens on their ports.
func stopAll(c *cluster.Cluster, d *display) error {
	d.finish()
	start := time.Now()
	d.step("stopping the workers, NATS and Azurite")
	addrs := append(hostsOf(c.ConnStr), strings.TrimPrefix(c.NATSURL, "nats://"))
	c.Stop()
	if r := c.Running(); len(r) > 0 {
		return fmt.Errorf("%w: workers still running after stop: %v", errLeftBehind, r)
	}
	for _, a := range addrs {
		if conn, err := net.DialTimeout("tcp", a, 300*time.Millisecond); err == nil {
			conn.Close()
			return fmt.Errorf("%w: %s still accepts connections after stop", errLeftBehind, a)
		}
	}
	d.done(time.Since(start))
	return nil
}

// hostsOf returns the host:port of the blob and queue endpoints of a connection string.
func hostsOf(connStr string) []string {
	var out []string
	for _, part := range strings.Split(connStr, ";") {
		k, v, _ := strings.Cut(part, "=")
		if k == "BlobEndpoint" || k == "QueueEndpoint" {
			if u, err := url.Parse(v); err == nil {
				out = append(out, u.Host)
			}
		}
	}
	return out
}

func storageHosts(connStr string) string {
	h := hostsOf(connStr)
	if len(h) != 2 {
		return "?"
	}
	return "blob " + h[0] + " queue " + h[1]
}

// rel shortens a path below the working directory.
func rel(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if r, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// dashboard returns the HTTP address of a worker other than the leader, as the workers announce
// it on NATS within a few seconds of starting ("" if none did within 3 s).
func dashboard(ctx context.Context, c *cluster.Cluster, leader string) (addr, worker string) {
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, m := range c.Members() {
			if m.ID != leader && m.HTTPAddr != "" {
				return m.HTTPAddr, m.ID
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", ""
}
