package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/coordinator/jobread"
	"github.com/mapagg/mapagg/internal/coordinator/lifecycle"
	"github.com/mapagg/mapagg/internal/coordinator/schedule"
	"github.com/mapagg/mapagg/jobs"
)

// Coordinator is the leader-only work. One Coordinator lives as long as its process; each term
// of leadership is one call to Lead.
type Coordinator struct {
	cfg   Config
	store Store
	queue Queue
	bus   Bus
	env   jobs.Env
	log   *slog.Logger

	leading  atomic.Bool
	lastBeat atomic.Int64  // unix nanos of the main loop's last turn
	qhealth  queueHealth   // intake's receives
	pace     shardPace     // how long each type's shards run (pace.go)
	seen     atomic.Uint64 // the highest writer epoch of any checkpoint read (HighestEpochSeen)
}

// HighestEpochSeen is the highest epoch of any checkpoint this coordinator read: its next term
// must take an epoch above it (election.Elector.RaiseEpochFloor), even if the lease blob's
// epoch went back in time.
func (c *Coordinator) HighestEpochSeen() uint64 { return c.seen.Load() }

func (c *Coordinator) sawEpoch(n uint64) {
	for {
		s := c.seen.Load()
		if n <= s || c.seen.CompareAndSwap(s, n) {
			return
		}
	}
}

// New returns a coordinator over the jobs container, the intake queue and the bus; env is what
// job types read when they split a job.
func New(cfg Config, st Store, q Queue, b Bus, env jobs.Env) (*Coordinator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Coordinator{cfg: cfg, store: st, queue: q, bus: b, env: env, log: cfg.Logger.With("component", "coordinator")}, nil
}

// Healthy reports ErrStalled when this process leads and its main loop has not turned within
// StallTimeout. Wire it to the elector, so a stuck coordinator stops renewing its lease.
func (c *Coordinator) Healthy() error {
	if !c.leading.Load() {
		return nil
	}
	if since := time.Since(time.Unix(0, c.lastBeat.Load())); since > c.cfg.StallTimeout {
		return fmt.Errorf("%w: no progress for %v", ErrStalled, since.Round(time.Millisecond))
	}
	if d, err := c.qhealth.err(); err != nil && c.cfg.QueueCutOff > 0 && d > c.cfg.QueueCutOff {
		return err // hand over: another worker may reach the queue
	}
	return nil
}

func (c *Coordinator) beat() { c.lastBeat.Store(time.Now().UnixNano()) }

// Lead runs one term of leadership until ctx ends (leadership lost or the process stopping) or
// the coordinator finds itself deposed. It resumes every running job from its checkpoint, then
// takes new jobs from the queue. On return it has stopped dispatching and written a final
// checkpoint of every job it could.
func (c *Coordinator) Lead(ctx context.Context, epoch uint64) error {
	t := c.newTerm(epoch)
	c.beat()
	c.qhealth.ok()
	c.leading.Store(true)
	defer c.leading.Store(false)
	t.log.Info("coordinator starting")
	genCtx, stopGen := context.WithCancel(ctx)
	var gen sync.WaitGroup
	gen.Go(func() { t.ck.learnGeneration(genCtx) })
	defer gen.Wait()
	defer stopGen()

	// A term stopped while it starts has ended normally, like one stopped later.
	stopped := func(err error) error {
		if ctx.Err() != nil && !errors.Is(err, ErrDeposed) {
			return nil
		}
		return err
	}
	if err := t.rescan(ctx); err != nil {
		return stopped(err)
	}
	feed, err := c.bus.OpenResults(ctx, epoch, c.cfg.ResultsPrefetch)
	if err != nil {
		return stopped(err)
	}
	defer feed.Stop()
	t.log.Info("coordinator resumed", "jobs", t.tab.len(), "since_elected", time.Since(t.elected).Round(time.Millisecond))
	t.rep.emit(Event{Kind: EventTermStarted, Epoch: epoch, Count: t.tab.len()})

	for _, sub := range []struct {
		subj string
		fn   func([]byte)
	}{
		{bus.CtlCancel, func(b []byte) { t.onCancelHint(ctx, string(b)) }},
		{bus.CtlSubmitted, func(b []byte) { t.in.announced(b) }},
	} {
		stop, err := c.bus.Subscribe(sub.subj, sub.fn)
		if err != nil {
			return stopped(fmt.Errorf("subscribe %s: %w", sub.subj, err))
		}
		defer stop()
	}
	t.in.listening = time.Now() // cancel hints are heard from here on (smalljob.go)

	// The components of their own, with their own goroutines (asynq's janitor and syncer).
	stageCtx, stopStages := context.WithCancel(ctx)
	var stages sync.WaitGroup
	for _, run := range []func(context.Context) error{
		func(ctx context.Context) error { t.in.run(ctx); return nil },
		func(ctx context.Context) error { t.life.Sweep.Run(ctx); return nil },
		t.sched.Run,
		t.life.RunRetention,
	} {
		stages.Add(1)
		go func() {
			defer stages.Done()
			if err := run(stageCtx); err != nil {
				nonBlocking(t.stageErr, err)
			}
		}()
	}

	err = t.loop(ctx, feed)

	// Step down: stop taking and dispatching work, then checkpoint what was merged, so the next
	// leader starts from here. The writes are fenced: if a newer leader already claimed a job, the
	// write fails and its results stay unacknowledged for that leader.
	stopStages()
	stages.Wait()
	for j := range t.tab.all() {
		if j.stopDispatch != nil {
			j.stopDispatch()
		}
	}
	t.dispatchers.Wait()
	t.ck.stepDown(ctx, errors.Is(err, ErrDeposed))
	t.cleanups.Wait()
	t.life.Sweep.Flush(ctx)
	t.log.Info("coordinator stopped", "merged", t.merged, "err", err)
	if ctx.Err() != nil && !errors.Is(err, ErrDeposed) {
		err = nil
	}
	t.rep.emit(Event{Kind: EventTermEnded, Epoch: epoch, Err: err})
	return err
}

// newTerm makes a term and its components, wired through their small interfaces.
func (c *Coordinator) newTerm(epoch uint64) *term {
	f := fence.New(epoch, c.log, c.store, c.sawEpoch)
	log := c.log.With("epoch", epoch, "term", f.ID)
	rep := reporter{log: log, emit: func(ev Event) { ev.Epoch = epoch; c.emitEvent(ev) }}
	t := &term{
		cfg: c.cfg, store: c.store, bus: c.bus, env: c.env, beat: c.beat,
		fence: f, rep: rep, elected: time.Now(), log: log,
		tab: newJobTable(), reader: jobread.Reader{Store: c.store}, pace: &c.pace,
		dispatched: make(chan dispatchEvent, 256), cancels: make(chan string, 64), hints: cancelHints{},
		stageErr: make(chan error, 1), kick: make(chan struct{}, 1),
		keyedLost: make(chan keyedLoss, 16), looked: make(chan []repairLook, 1),
	}
	t.plans = &planner{fence: f, cfg: c.cfg, env: c.env, store: c.store, log: c.log}
	t.send = &shardSender{log: log, bus: c.bus, batch: c.cfg.DispatchBatch, termID: f.ID, progress: t.dispatched}
	t.life = lifecycle.New(f, log, rep.emit, c.cfg, c.store, c.queue, c.bus)
	t.in = newIntake(f, rep, c.cfg, c.store, c.queue, c.bus, &c.qhealth, t.tab, t.plans, t.life, t.reader)
	t.in.pace = &c.pace
	t.in.elected = t.elected
	t.life.Sweep = lifecycle.NewSweeper(log, c.store, t.in, t.tab, t.life.KeepIfRolledBack)
	t.sched = schedule.New(f, log, rep.emit, c.cfg, c.store, t.reader, t.in)
	t.ck = newCheckpointer(f, rep, c.cfg, c.store, t.tab, t)
	return t
}

func (t *term) loop(ctx context.Context, feed *bus.Feed) error {
	ckpt := time.NewTicker(t.cfg.CheckpointInterval)
	defer ckpt.Stop()
	rescan := time.NewTicker(t.cfg.RescanInterval)
	defer rescan.Stop()
	repair := time.NewTicker(t.cfg.RepairInterval)
	defer repair.Stop()
	backup := time.NewTicker(backupCheckInterval)
	defer backup.Stop()
	fair := time.NewTicker(fairInterval)
	defer fair.Stop()
	if t.cfg.NoBackupTasks {
		backup.Stop()
	}
	for {
		t.beat()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case d, ok := <-feed.C:
			if !ok {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return feedEnded(feed)
			}
			if err := t.onResult(ctx, d); err != nil {
				return err
			}
		case w := <-t.ck.writes:
			if err := t.ck.stored(ctx, w, true); err != nil {
				return err
			}
		case err := <-t.stageErr:
			return err
		case <-t.kick:
			if err := t.rescan(ctx); err != nil {
				return err
			}
		case j := <-t.in.handed:
			t.adopt(ctx, j)
		case id := <-t.in.claims:
			if err := t.ensure(ctx, id); err != nil {
				return err
			}
		case ev := <-t.dispatched:
			t.onDispatched(ev)
		case l := <-t.keyedLost:
			t.onKeyedLoss(ctx, l) // keyedterm.go
		case id := <-t.cancels:
			t.cancel(ctx, id, "cancelled by user")
		case <-ckpt.C:
			t.ck.tick(ctx)
		case now := <-fair.C:
			t.rebalance(now)
		case <-backup.C: // stopped with NoBackupTasks
			t.backups(ctx)
		case <-repair.C:
			t.repair(ctx)
		case looks := <-t.looked:
			t.onLooked(ctx, looks)
		case <-rescan.C:
			if err := t.rescan(ctx); err != nil {
				return err
			}
			t.checkCancels(ctx)
		}
	}
}

// feedEnded is why a term whose results feed closed ends: the bus ends a leader's feed only
// when a newer leader's consumer holds the results stream (a consumer or stream lost otherwise
// is created again, bus/heal.go), so the term was deposed. The feed's last pull error, if any,
// goes with it.
func feedEnded(feed *bus.Feed) error {
	if _, ferr := feed.Err(); ferr != nil {
		return fmt.Errorf("%w: results feed ended: a newer leader's consumer holds the stream (last pull error: %v)", ErrDeposed, ferr)
	}
	return fmt.Errorf("%w: results feed ended: a newer leader's consumer holds the stream", ErrDeposed)
}

// emit calls Config.OnEvent, if set. It runs on the coordinator's goroutines and must not block.
func (c *Coordinator) emitEvent(ev Event) {
	if c.cfg.OnEvent == nil {
		return
	}
	ev.At = c.cfg.Now()
	c.cfg.OnEvent(ev)
}

// IntakeErr is why this leader cannot take jobs off the queue now, or nil (also while following).
func (c *Coordinator) IntakeErr() error {
	if !c.leading.Load() {
		return nil
	}
	_, err := c.qhealth.err()
	return err
}

// onDispatched records a dispatcher's progress in its job, or fails the job.
func (t *term) onDispatched(ev dispatchEvent) {
	j := t.tab.get(ev.job)
	if j == nil || j.cp.State.Terminal() {
		return
	}
	if ev.err != nil {
		t.fail(j, core.WrapOp("dispatch", ev.err))
		return
	}
	if ev.upto > j.cp.Dispatched {
		j.cp.Dispatched, j.dirty = ev.upto, true
	}
}
