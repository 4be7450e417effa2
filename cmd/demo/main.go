// Command demo is `make demo`: one leader failover, narrated.
//
// It runs a real cluster on this machine (Azurite, an in-process NATS server, three `worker run`
// processes) and submits a primes job. Half-way it kills the leader with SIGKILL and shows the
// fast takeover. A follower misses a heartbeat and finds the leader's term has no responders
// (its process is gone). It breaks the lease fenced on its epoch and is elected, well under a
// second without a leader instead of the 15 s lease. The demo checks the result is exact.
//
// It stops every process it started, by pid, and checks that none is left: on success, on failure
// and on Ctrl-C. Its files (worker binary, server data, one log per worker process) are under
// .demo/run in the repository; the logs of the last run stay there for reading.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
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
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/jobs"
)

// The job: count the primes below 2·10^7. π(2·10^7) = 1,270,607 is a published value, so the
// demo can say "exact" rather than "finished".
const (
	jobParams = `{"from":0,"to":20000000,"shards":200}`
	wantCount = 1270607
)

// The ends of a run that main tells apart: Ctrl-C or SIGTERM, and a process that outlived the stop.
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
		os.Exit(rig.ExitInterrupted)
	default:
		fmt.Fprintf(os.Stderr, "demo: %v\n", err)
		os.Exit(rig.ExitFailed)
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
	// A fresh cluster every run: old data would hold old jobs and an old lease.
	runDir := filepath.Join(o.dir, "run")
	// Whatever went wrong, say it was Ctrl-C when it was (main's ctx ends only on a signal).
	interrupted := ctx
	defer func() {
		switch {
		case err == nil:
		case interrupted.Err() != nil && !errors.Is(err, errLeftBehind):
			err = errInterrupted
		case errors.Is(err, context.DeadlineExceeded):
			err = fmt.Errorf("gave up after %v (-timeout); the worker logs are in %s: %w", o.timeout, rel(runDir), err)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()

	log := rig.NewProgress(out)
	log.Logf("mapagg demo: %d workers count the primes below 20,000,000; the leader dies half-way.", o.workers)
	if err := os.RemoveAll(runDir); err != nil {
		return err
	}
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	rg, err := rig.New(ctx, rig.Options{Dir: runDir, Shared: true, Logf: log.Logf})
	if err != nil {
		return err
	}
	defer func() {
		rg.Close()
		if left := rg.LeftRunning(); len(left) > 0 {
			err = errors.Join(fmt.Errorf("%w: %s", errLeftBehind, strings.Join(left, "; ")), err)
		} else {
			log.Logf("stopped the workers, NATS and Azurite; nothing left running")
		}
	}()
	// The worker's own shard timeout (5 s) and heartbeat settings: the demo shows the defaults.
	c, err := rg.Start(ctx, rig.Spec{Name: "demo", Workers: o.workers, MapDelay: o.mapDelay, Concurrency: 2})
	if err != nil {
		return fmt.Errorf("%w (logs in %s)", err, rel(runDir))
	}
	first, err := rig.Leader(ctx, c)
	if err != nil {
		return err
	}
	log.Logf("▸ %d workers up (logs in %s); %s is leader (epoch %d)", o.workers, rel(c.Options().Dir), first.ID, first.Epoch)
	if addr, by := dashboard(ctx, c, first.ID); addr != "" {
		log.Logf("▸ dashboard: http://%s/ (served by %s, which outlives the kill; every worker serves one)", addr, by)
	}

	id, err := c.Client.Submit(ctx, "primes", json.RawMessage(jobParams))
	if err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	log.Logf("▸ submitted %s: primes in [0, 20000000), 200 shards, each slowed by %v (-map-delay)", id, o.mapDelay)

	f, err := follow(ctx, c, log, id, first)
	if err != nil {
		return err
	}
	return report(log, f, o)
}

// failover is what happened to one job.
type failover struct {
	status    *client.Status
	took      time.Duration
	killed    *rig.Kill      // the leader killed; nil if the job ended first
	doneAt    int            // shards merged when it was killed
	suspected *cluster.Event // the first follower to miss the killed leader's heartbeats
	noResp    *cluster.Event // the fast path: its term had no responders (the process is gone)
	broke     *cluster.Event // the fenced lease break that ended its term
	elected   *cluster.Event
	firstMrg  *cluster.Event
}

// follow polls the job until it ends, kills the leader half-way, waits for the next election
// and restarts the killed worker.
func follow(ctx context.Context, c *cluster.Cluster, log *rig.Progress, id string, first *election.LeaderInfo) (*failover, error) {
	f := &failover{}
	start := time.Now()
	log.Phase("shards merged", 200)
	defer log.Done()
	log.Describe(fmt.Sprintf("leader %s (epoch %d)", first.ID, first.Epoch))
	// after is the first event of kind after the kill, once.
	after := func(seen **cluster.Event, kind string) bool {
		if f.killed == nil || *seen != nil {
			return false
		}
		ev, ok := c.EventAfter(kind, f.killed.At)
		if ok {
			*seen = &ev
		}
		return ok
	}
	for {
		st, err := c.Client.Status(ctx, id)
		if err != nil && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err == nil {
			f.status = st
			log.Set(st.ShardsDone)
			if st.State.Terminal() {
				f.took = time.Since(start)
				st, err := rig.Final(ctx, c, id) // status is metadata only: read the result
				f.status = st
				return f, err
			}
			if f.killed == nil && st.ShardsTotal > 0 && 2*st.ShardsDone >= st.ShardsTotal {
				log.Logf("▸ %d of %d shards merged: killing the leader with SIGKILL", st.ShardsDone, st.ShardsTotal)
				k, err := rig.KillLeader(ctx, c, syscall.SIGKILL, false, nil)
				if err != nil {
					return nil, fmt.Errorf("kill the leader: %w", err)
				}
				f.killed, f.doneAt = &k, st.ShardsDone
				log.Describe("no leader")
				log.Logf("  %s (epoch %d) is gone: its heartbeats stop and NATS drops its subscriptions. The followers probe its term and need not wait out the suspicion timeout (1.5 s), let alone the 15 s lease. The workers keep mapping.", k.Worker, k.Epoch)
			}
		}
		if f.suspected == nil && after(&f.noResp, string(election.EventNoResponders)) {
			ev := f.noResp
			f.suspected = ev
			log.Logf("▸ %s missed a heartbeat and probed %s's term: no responders (the process is gone), %.2f s after the kill. No need to wait for the suspicion timeout.", ev.Worker, f.killed.Worker, ev.Time.Sub(f.killed.At).Seconds())
		}
		if after(&f.suspected, string(election.EventSuspected)) {
			ev := f.suspected
			log.Logf("▸ %s suspects %s: no heartbeat for the suspicion timeout (%.1f s after the kill)", ev.Worker, f.killed.Worker, ev.Time.Sub(f.killed.At).Seconds())
		}
		if after(&f.broke, string(election.EventBrokeLease)) {
			log.Logf("▸ %s broke the lease of epoch %d (a conditional break on its ETag: only that term)", f.broke.Worker, f.killed.Epoch)
		}
		if after(&f.elected, cluster.Elected) {
			ev := f.elected
			log.Describe(fmt.Sprintf("leader %s (epoch %d)", ev.Worker, ev.Epoch))
			log.Logf("▸ %s elected (epoch %d) %.1f s after the kill", ev.Worker, ev.Epoch, ev.Time.Sub(f.killed.At).Seconds())
			if _, err := c.StartWorker(f.killed.Worker); err != nil {
				log.Logf("  could not restart %s: %v", f.killed.Worker, err)
			} else {
				log.Logf("▸ %s restarted; it joins as a follower", f.killed.Worker)
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
		if err := rig.Sleep(ctx, 100*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// report prints the outcome and says whether the result is exact.
func report(log *rig.Progress, f *failover, o options) error {
	st := f.status
	if st.State != jobs.StateSucceeded {
		return fmt.Errorf("job %s %s: %s", st.ID, st.State, st.Error)
	}
	var res builtin.PrimesResult
	if err := json.Unmarshal(st.Result, &res); err != nil {
		return fmt.Errorf("result %s: %w", st.Result, err)
	}
	line := func(format string, a ...any) { log.Logf("  "+format, a...) }
	line("job               %s succeeded in %.1f s", st.ID, f.took.Seconds())
	if k := f.killed; k != nil {
		line("old leader        %s, epoch %d: killed with SIGKILL at %d/%d shards", k.Worker, k.Epoch, f.doneAt, st.ShardsTotal)
	}
	if f.elected != nil {
		line("new leader        %s, epoch %d", f.elected.Worker, f.elected.Epoch)
		how := "heartbeats missed, then a fenced lease break"
		if f.noResp != nil {
			how = "a heartbeat missed, its term had no responders, then a fenced lease break"
		}
		if f.broke == nil {
			how = "no lease break seen: the lease ran out"
		}
		line("without a leader  %.1f s (kill → elected; %s; the lease is 15 s)", f.elected.Time.Sub(f.killed.At).Seconds(), how)
		if f.firstMrg != nil {
			line("first merge       %s after the election (results waited on JetStream)", f.firstMrg.Time.Sub(f.elected.Time).Round(time.Millisecond))
		}
	}
	line("duplicates        %d results dropped because their shard was already merged", st.Duplicates)
	line("result            %s", st.Result)
	if res.Count != wantCount {
		return fmt.Errorf("wrong result: %d primes below 20,000,000, want %d", res.Count, wantCount)
	}
	line("                  exact: π(2·10^7) = 1,270,607")
	if f.killed == nil {
		line("(the job ended before half of it was seen; try a larger -map-delay than %v to see a takeover)", o.mapDelay)
	}
	return nil
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

// dashboard returns the HTTP address a worker other than the leader announced ("" if none did
// within 3 s). The workers announce it on NATS within a few seconds of starting.
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
