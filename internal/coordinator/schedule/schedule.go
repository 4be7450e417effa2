package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/coordinator/fence"
	"github.com/mapagg/mapagg/internal/coordinator/jobread"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Schedules. The leader fires every schedule's ticks from a stage of its own. A tick makes
// exactly one job however many leaders die on the way:
//
//   - The tick is claimed with a marker created If-None-Match, naming this term's epoch and the
//     decision (the job, or none when the overlap policy skipped the tick). A leader that finds
//     a marker of a newer term yields, as it does for checkpoints (fence.go); one that finds a
//     marker of an older term completes that term's decision.
//   - The job's id is derived from (schedule, generation, tick), and its spec is written
//     If-None-Match: a tick fired again after a storage rollback lost the marker still writes
//     one spec.
//   - A schedule whose overlap policy is allow decides nothing per tick: every tick makes its job,
//     so its spec (If-None-Match on the derived id) is the claim, and no marker is written.
//   - The schedule's state (last tick handled, last job, the counters) is written If-Match,
//     fenced like a checkpoint: at once when a tick was skipped, buffered or missed, else at
//     most every saveEvery. It only says where to look next; the marker and the spec decide.
//     A term that finds a state older than its predecessor's progress walks those ticks again:
//     their jobs exist, and nothing is made twice.
//
// Ticks missed while there was no leader are fired late, within the schedule's catch-up window;
// older ones are counted as missed (unless their job exists: a term died before saving it).

const (
	// maxTicksPerPass bounds the ticks one schedule fires in a pass, so a long catch-up does
	// not hold the others.
	maxTicksPerPass = 16
	// tickKeep is how long tick markers are kept after their tick (the job id guards older ones).
	// MaxMissedCount bounds the missed ticks counted one by one after a long outage.
	MaxMissedCount = 100_000
	tickKeep       = time.Hour
	pruneEvery     = time.Minute
	// passWorkers is how many schedules a pass handles at once: a tick costs two storage
	// round trips (spec, queue message), so hundreds of schedules a second need them in flight
	// together.
	passWorkers = 64
	// saveEvery bounds how long a schedule's state may lag behind the ticks fired (a tick only
	// fired, nothing skipped or missed). A next term walks those ticks again, and finds their jobs.
	saveEvery = 5 * time.Second
	// flushFor bounds the writes of unsaved states when a term ends.
	flushFor = 3 * time.Second
	// unsureSlack is added to saveEvery when a term looks for jobs a predecessor made after its
	// last save: a pass may take that long under load.
	unsureSlack = 10 * time.Second
	// passFor bounds how long a pass fires ticks after its listing (see Scheduler.listed), and
	// saveFor how long it writes states: both well under a DELETE's wait for the leader (15 s),
	// after which the client removes the blobs itself.
	passFor = 5 * time.Second
	saveFor = 10 * time.Second
)

// Scheduler is the component that fires schedule ticks: what it knows of each schedule's state.
type Scheduler struct {
	fence  *fence.Fence
	log    *slog.Logger
	emit   func(core.Event)
	cfg    core.Config
	store  core.Store
	reader jobread.Reader // the state of a schedule's last job
	submit submitter
	mu     sync.Mutex // guards states and defs (a pass works on schedules in parallel, each by one goroutine)
	states map[string]*schedState
	defs   map[string]cachedDef // by name: definitions read, kept while their ETag holds
	// troubles is store.TransientFailures when the last pass began.
	troubles atomic.Uint64
	// troubledAt is when the latest pass began that found storage had been in trouble since
	// the pass before. Ticks due by then fell due in an outage: they are the catch-up window's
	// (each fires), not the fell-behind rule's, which is for a scheduler that storage answers
	// slowly, not one it did not answer.
	troubledAt time.Time
	// began is when this term's scheduler started: a tick due after it that is still unfired
	// when the schedule's next tick is due was missed by this term (it fell behind), not by an
	// outage, and is counted missed instead of fired late.
	began time.Time
	// listed is when the running pass's listing was asked for. No tick is fired and no state
	// written once it is passFor old: a definition marked for deletion after it shows in the
	// next listing, and a DELETE waits longer than passFor (client.deleteWait).
	listed time.Time
	// next is where the next pass starts in the listing, so that passes cut short by passFor
	// reach every schedule in turn.
	next int
	// behind counts the ticks missed this pass because the scheduler fell behind (logged once).
	behind, behindOf atomic.Int64
	// queueWait is how long a job queued in this pass would wait before intake takes it: the
	// queue's depth over intake's recent rate (at least one a second). A tick whose job would
	// wait longer than its schedule's interval is counted missed: its next tick would be due
	// before it started. lastLook and lastTaken are the previous pass's look.
	queueWait time.Duration
	lastLook  time.Time
	lastTaken int64
	// reached is, by schedule (name and generation), the latest tick this term decided. Ticks
	// up to it are walked again after a state is read again (a rollback, storage trouble) and
	// their lost jobs made; only later ones can be left behind (began). Guarded by mu.
	reached map[string]time.Time
	// sweptAt is the last listing of the states (sweepStates); orphans the states it found of
	// schedules no longer defined, with when this term first saw each so.
	sweptAt time.Time
	orphans map[string]time.Time
}

// cachedDef is a definition as read, under the ETag the listing showed.
type cachedDef struct {
	etag store.ETag
	def  *protocol.Schedule // nil: unreadable (left as it is until it changes)
}

// etagLister lists blobs with their ETags (store.Container): a pass then reads only the
// definitions that changed.
type etagLister interface {
	ListETags(ctx context.Context, prefix string) ([]store.Listed, error)
}

// batchDeleter deletes many blobs a request (store.Container).
type batchDeleter interface {
	DeleteBatch(ctx context.Context, names []string) error
}

var (
	_ etagLister   = (*store.Container)(nil)
	_ batchDeleter = (*store.Container)(nil)
)

// submitter queues a job whose spec is stored (intake).
type submitter interface {
	Enqueue(ctx context.Context, id string) error
}

// backlogger tells the job queue's depth and how many jobs intake took in (intake): how long a
// job queued now would wait (queueWait).
type backlogger interface {
	Backlog(ctx context.Context) (depth int, taken int64, err error)
}

type schedState struct {
	st        protocol.ScheduleState
	etag      store.ETag // "" while the state is not stored
	lastPrune time.Time
	// dirty: st has ticks the stored state lacks; urgent: among them a count other than fired
	// (skipped, missed, a buffered tick), written at the end of the pass.
	dirty, urgent bool
	savedAt       time.Time // this term's last write of st (zero: none yet, the first is at once)
	marked        bool      // this term claimed tick markers of the schedule since the last prune
	pruned        bool      // prune looked once this term
	// unsure: ticks up to it may have made their jobs in a term that died before saving them
	// (set when the state is read).
	unsure time.Time
}

// run fires schedule ticks until ctx ends. It returns core.ErrDeposed when it finds a newer term's
// writes.
func (s *Scheduler) Run(ctx context.Context) error {
	for {
		next, err := s.pass(ctx)
		if errors.Is(err, core.ErrDeposed) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			s.log.Warn("schedules", "err", err)
		}
		wait := s.cfg.ScheduleInterval
		if !next.IsZero() {
			wait = min(wait, max(time.Until(next), 0))
		}
		select {
		case <-ctx.Done():
			s.flushAll(context.WithoutCancel(ctx))
			return nil
		case <-time.After(wait):
		}
	}
}

// forget drops the states this term holds; each is read from storage at its next pass.
// It returns how many it dropped.
func (s *Scheduler) forget() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.states)
	clear(s.states)
	return n
}

// flushAll writes, at the term's end, the states with fired ticks not yet saved, so the next
// term starts where this one stopped (it would find the jobs, at a few requests a tick). Each
// write is If-Match: a newer term's write is never overwritten.
func (s *Scheduler) flushAll(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, flushFor)
	defer cancel()
	s.mu.Lock()
	var dirty []*schedState
	for _, ss := range s.states {
		if ss.dirty {
			dirty = append(dirty, ss)
		}
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	sem := make(chan struct{}, passWorkers)
	for _, ss := range dirty {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := s.save(ctx, ss); err != nil && !errors.Is(err, errStateReloaded) {
				s.log.Warn("write schedule state at the term's end", "schedule", ss.st.Name, "err", err)
			}
		}()
	}
	wg.Wait()
}

// pass reads every schedule and fires its due ticks, passWorkers schedules at a time (each
// schedule by one goroutine). It returns the earliest next tick.
func (s *Scheduler) pass(ctx context.Context) (time.Time, error) {
	if n := store.TransientFailures(); n != s.troubles.Load() {
		// Storage was in trouble since the last pass: it may have been down, and an emulator
		// (or a restored account) can come back without writes it acknowledged, a fired
		// tick's spec among them. The states are read again, and each schedule's ticks since
		// its stored state are walked again: a lost spec is written again and queued, a kept
		// one is found (If-None-Match), so no tick is lost and none runs twice. No state was
		// saved since the trouble (save), so a stored state never covers a lost spec.
		s.troubles.Store(n)
		s.troubledAt = s.cfg.Now()
		if s.forget() > 0 {
			s.log.Info("storage was in trouble: schedule states read again, ticks since them walked again")
		}
	}
	s.listed = s.cfg.Now()
	s.behind.Store(0)
	s.behindOf.Store(0)
	blobs, err := s.list(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("list schedules: %w", err)
	}
	if len(blobs) > 0 {
		s.lookAtQueue(ctx) // one request a pass: not for a cluster without schedules
	} else {
		s.queueWait, s.lastLook = 0, time.Time{}
	}
	seen := map[string]bool{}
	var names []string
	etags := map[string]store.ETag{}
	for _, b := range blobs {
		name := strings.TrimSuffix(strings.TrimPrefix(b.Name, protocol.ScheduleDefsPrefix), ".json")
		if protocol.CheckScheduleName(name) != nil {
			continue
		}
		seen[name] = true
		names = append(names, name)
		etags[name] = b.ETag
	}
	var (
		mu       sync.Mutex
		earliest time.Time
		firstErr error
	)
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(passWorkers, len(names)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for name := range work {
				next, err := s.one(ctx, name, etags[name])
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if !next.IsZero() && (earliest.IsZero() || next.Before(earliest)) {
					earliest = next
				}
				mu.Unlock()
			}
		}()
	}
	// Definitions that changed since this term read them go first (a DELETE's mark, a pause, a
	// new schedule): a DELETE waits for its removal, and a pass cut short (passFor) must not
	// leave it behind the others. The rest in turn from where the last pass stopped.
	start := 0
	if len(names) > 0 {
		start = s.next % len(names)
	}
	order := make([]int, 0, len(names))
	s.mu.Lock()
	for k := range names {
		i := (start + k) % len(names)
		if c, ok := s.defs[names[i]]; !ok || etags[names[i]] == "" || !sameETag(c.etag, etags[names[i]]) {
			order = append(order, i)
		}
	}
	first := len(order)
	for k := range names {
		i := (start + k) % len(names)
		if c, ok := s.defs[names[i]]; ok && etags[names[i]] != "" && sameETag(c.etag, etags[names[i]]) {
			order = append(order, i)
		}
	}
	s.mu.Unlock()
	cut := false
feed:
	for k, i := range order {
		mu.Lock()
		stop := firstErr != nil
		mu.Unlock()
		if stop {
			break
		}
		if s.stale() {
			// Out of time: the next pass starts at the first unchanged schedule not reached,
			// so every schedule gets its turn.
			if k >= first {
				s.next = i
			}
			cut = true
			break
		}
		select {
		case work <- names[i]:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if n := s.behind.Load(); n > 0 {
		s.log.Warn("schedule ticks missed: the scheduler fell behind (each schedule fires its latest due tick, none while a job would wait past its next tick)",
			"missed", n, "schedules", s.behindOf.Load(), "queue_wait", s.queueWait.Round(time.Millisecond))
	}
	if cut {
		earliest = s.cfg.Now() // go on at once
	}
	if firstErr != nil {
		return earliest, firstErr
	}
	s.sweepStates(ctx, seen)
	s.mu.Lock()
	for name := range s.states {
		if !seen[name] {
			delete(s.states, name) // deleted: a schedule added again under the name starts afresh
		}
	}
	for name := range s.defs {
		if !seen[name] {
			delete(s.defs, name)
		}
	}
	for key := range s.reached {
		if name, _, _ := strings.Cut(key, "/"); !seen[name] {
			delete(s.reached, key)
		}
	}
	s.mu.Unlock()
	return earliest, nil
}

// lookAtQueue sets queueWait for this pass from the queue's depth and intake's rate since the
// last pass. Without a depth (or on an error) it is zero: every due tick fires.
func (s *Scheduler) lookAtQueue(ctx context.Context) {
	s.queueWait = 0
	b, ok := s.submit.(backlogger)
	if !ok {
		return
	}
	depth, taken, err := b.Backlog(ctx)
	now := s.cfg.Now()
	if err != nil {
		s.lastLook = time.Time{}
		return
	}
	if !s.lastLook.IsZero() && now.After(s.lastLook) && depth > 0 {
		rate := max(float64(taken-s.lastTaken)/now.Sub(s.lastLook).Seconds(), 1)
		s.queueWait = time.Duration(float64(depth) / rate * float64(time.Second))
	}
	s.lastLook, s.lastTaken = now, taken
}

// stale reports whether the running pass's listing is passFor old: no more ticks are fired nor
// states written in it.
func (s *Scheduler) stale() bool {
	return s.cfg.Now().Sub(s.listed) >= passFor
}

// list lists the definitions, with their ETags when the store gives them.
func (s *Scheduler) list(ctx context.Context) ([]store.Listed, error) {
	if l, ok := s.store.(etagLister); ok {
		return l.ListETags(ctx, protocol.ScheduleDefsPrefix)
	}
	blobs, err := s.store.List(ctx, protocol.ScheduleDefsPrefix)
	out := make([]store.Listed, len(blobs))
	for i, b := range blobs {
		out[i] = store.Listed{Name: b.Name} // no ETag: read every pass
	}
	return out, err
}

// definition returns schedule name's definition: the one read before while the listing's ETag
// is the same, else read now. It returns nil, nil when the schedule is gone or unreadable.
func (s *Scheduler) definition(ctx context.Context, name string, etag store.ETag) (*protocol.Schedule, error) {
	s.mu.Lock()
	c, ok := s.defs[name]
	s.mu.Unlock()
	if ok && etag != "" && sameETag(c.etag, etag) {
		return c.def, nil
	}
	data, got, err := s.store.Get(ctx, protocol.ScheduleBlob(name))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // deleted meanwhile
	}
	if err != nil {
		return nil, err
	}
	def, err := protocol.ParseSchedule(data)
	if err == nil && def.Name != name {
		err = fmt.Errorf("it names schedule %q", protocol.Clip(def.Name, 64))
	}
	if err != nil {
		s.log.Warn("unreadable schedule left as it is", "schedule", name, "err", err)
		def = nil
	}
	// Kept under the ETag read: a change after the listing shows in the next one.
	s.mu.Lock()
	s.defs[name] = cachedDef{etag: got, def: def}
	s.mu.Unlock()
	return def, nil
}

// sameETag compares ETags as a listing and a read give them (quoted or not).
func sameETag(a, b store.ETag) bool {
	return strings.Trim(string(a), `"`) == strings.Trim(string(b), `"`)
}

// one reads the schedule name and fires its due ticks (or, when it is being deleted, removes
// it). It returns its next tick; only storage errors that stop the pass (a newer term) are
// returned.
func (s *Scheduler) one(ctx context.Context, name string, etag store.ETag) (time.Time, error) {
	if ctx.Err() != nil {
		return time.Time{}, nil
	}
	def, err := s.definition(ctx, name, etag)
	if err != nil {
		s.log.Warn("schedule", "schedule", name, "err", err)
		return time.Time{}, nil
	}
	if def == nil {
		return time.Time{}, nil
	}
	if def.Deleting {
		if err := s.remove(ctx, def); err != nil && ctx.Err() == nil {
			s.log.Warn("delete schedule", "schedule", name, "err", err)
		}
		return time.Time{}, nil
	}
	if def.Paused {
		return time.Time{}, nil
	}
	next, err := s.fire(ctx, def)
	if errors.Is(err, core.ErrDeposed) {
		return time.Time{}, err
	}
	if errors.Is(err, errStateReloaded) {
		next, err = s.cfg.Now(), nil // look again at once
	}
	if err != nil {
		s.log.Warn("schedule", "schedule", name, "err", err)
		return time.Time{}, nil
	}
	return next, nil
}

// remove deletes a schedule being deleted: stores its final state (final), deletes its tick
// markers, then its definition — the client's DELETE is acknowledged when the definition is
// gone, reads the final state and removes it; this goroutine fires none of the schedule's ticks
// after it read the deletion. A final state not yet stored (the pass ran out of time, storage
// was in trouble) leaves the schedule for the next pass.
func (s *Scheduler) remove(ctx context.Context, def *protocol.Schedule) error {
	stored, err := s.final(ctx, def)
	if err != nil || !stored {
		return err
	}
	s.mu.Lock()
	delete(s.states, def.Name)
	delete(s.defs, def.Name)
	s.mu.Unlock()
	marks, err := s.store.List(ctx, protocol.ScheduleTicksOf(def.Name))
	if err != nil {
		return err
	}
	if err := s.deleteAll(ctx, marks); err != nil {
		return err
	}
	if err := s.store.Delete(ctx, protocol.ScheduleBlob(def.Name)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	s.log.Info("schedule deleted", "schedule", def.Name, "markers", len(marks))
	return nil
}

// final stores def's final state: every tick due up to its deletion (DeletingAt) that no term
// handled is counted missed, so the counts its DELETE reads add up to its due ticks. It
// reports whether the state is stored.
func (s *Scheduler) final(ctx context.Context, def *protocol.Schedule) (bool, error) {
	ss, err := s.state(ctx, def)
	if err != nil {
		return false, err
	}
	if ss.st.Final && !ss.dirty {
		return true, nil // stored by an earlier pass, whose removal stopped half-way
	}
	st := &ss.st
	until := s.cfg.Now()
	if def.DeletingAt != nil && def.DeletingAt.Before(until) {
		until = *def.DeletingAt
	}
	if st.Buffered != nil {
		// The tick that waited for the previous job never fired.
		st.Buffered = nil
		ss.missed(1, *st.LastTick)
	}
	if !def.Paused {
		for tick := def.Next(since(def, st)); !tick.IsZero() && !tick.After(until); tick = def.Next(tick) {
			made, err := s.madeUnsaved(ctx, def, ss, tick)
			if err != nil {
				return false, err
			}
			if !made {
				n, last, capped := missedRun(def, ss.unsure, tick, MaxMissedCount, func(k time.Time) bool { return !k.After(until) })
				ss.missed(n, last)
				if capped {
					break
				}
				tick = last
			}
		}
	}
	st.Final = true
	ss.dirty, ss.urgent = true, true
	if err := s.save(ctx, ss); err != nil {
		return false, err
	}
	return !ss.dirty, nil
}

// since is the time after which def's ticks are not yet handled by st: its creation, its last
// handled tick, or its resumption (ticks while paused are not caught up), whichever is latest.
func since(def *protocol.Schedule, st *protocol.ScheduleState) time.Time {
	at := def.CreatedAt
	if st.LastTick != nil && st.LastTick.After(at) {
		at = *st.LastTick
	}
	if def.ResumedAt != nil && def.ResumedAt.After(at) {
		at = *def.ResumedAt
	}
	return at
}

// sweepStates deletes the states of schedules that are no longer defined (seen: the pass's
// whole listing), once this term has seen each so for protocol.FinalKeep: a DELETE's final
// state that its client did not take, or a state written as a client removed its schedule. The
// states are listed at most once a pruneEvery.
func (s *Scheduler) sweepStates(ctx context.Context, seen map[string]bool) {
	now := s.cfg.Now()
	if now.Sub(s.sweptAt) < pruneEvery {
		return
	}
	s.sweptAt = now
	blobs, err := s.store.List(ctx, protocol.ScheduleStatePrefix)
	if err != nil {
		return
	}
	orphans := map[string]time.Time{}
	for _, b := range blobs {
		name := strings.TrimSuffix(strings.TrimPrefix(b.Name, protocol.ScheduleStatePrefix), ".json")
		if seen[name] {
			continue
		}
		at, ok := s.orphans[name]
		if !ok {
			at = s.sweptAt
		}
		if s.sweptAt.Sub(at) < protocol.FinalKeep {
			orphans[name] = at
			continue
		}
		if err := s.store.Delete(ctx, b.Name); err != nil && !errors.Is(err, store.ErrNotFound) {
			orphans[name] = at
		}
	}
	s.orphans = orphans
}

// deleteAll deletes blobs, many a request when the store can.
func (s *Scheduler) deleteAll(ctx context.Context, blobs []jobs.BlobInfo) error {
	names := make([]string, len(blobs))
	for i, b := range blobs {
		names[i] = b.Name
	}
	if bd, ok := s.store.(batchDeleter); ok && len(names) > 1 {
		return bd.DeleteBatch(ctx, names)
	}
	for _, n := range names {
		if err := s.store.Delete(ctx, n); err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
	}
	return nil
}

// state returns def's state: this term's copy, or the stored one (read once a term). This
// term's copy is not checked against storage each pass: its next write is If-Match, and a
// state changed under it (a storage rollback, a late write of an older term) is read again
// then, and the ticks since looked at again (save).
func (s *Scheduler) state(ctx context.Context, def *protocol.Schedule) (*schedState, error) {
	s.mu.Lock()
	ss, ok := s.states[def.Name]
	s.mu.Unlock()
	if ok && ss.st.UID == def.UID {
		return ss, nil
	}
	ss = &schedState{st: protocol.ScheduleState{Name: def.Name, UID: def.UID}, lastPrune: time.Now()}
	data, etag, err := s.store.Get(ctx, protocol.ScheduleStateBlob(def.Name))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		ss.etag = etag
		st, err := protocol.ParseScheduleState(data)
		if err != nil {
			s.log.Warn("unreadable schedule state replaced", "schedule", def.Name, "err", err)
			break
		}
		if err := s.fence.FencedBy(st.WriterEpoch, st.WriterTerm, "the state of schedule "+def.Name); err != nil {
			return nil, err
		}
		if st.UID == def.UID {
			ss.st = *st
		}
	}
	// A term may have made jobs after its last save of this state: up to saveEvery (and a
	// slow pass) after it. Those ticks are walked again; one older than the catch-up window
	// is counted fired, not missed, when its job exists (fire).
	if !ss.st.UpdatedAt.IsZero() {
		ss.unsure = ss.st.UpdatedAt.Add(saveEvery + unsureSlack)
	}
	s.mu.Lock()
	s.states[def.Name] = ss
	s.mu.Unlock()
	return ss, nil
}

// fire handles def's due ticks (at most maxTicksPerPass), saves the state when it is due, and
// returns the next tick.
func (s *Scheduler) fire(ctx context.Context, def *protocol.Schedule) (time.Time, error) {
	ss, err := s.state(ctx, def)
	if err != nil {
		return time.Time{}, err
	}
	next, err := s.walk(ctx, def, ss)
	if err != nil {
		if ss.dirty && !errors.Is(err, core.ErrDeposed) {
			// What was done before the error is kept: its markers and specs exist.
			ss.urgent = true
			if serr := s.flush(ctx, ss); serr != nil && !errors.Is(serr, errStateReloaded) {
				s.log.Warn("write schedule state", "schedule", def.Name, "err", serr)
			}
		}
		return time.Time{}, err
	}
	if err := s.flush(ctx, ss); err != nil {
		return time.Time{}, err
	}
	return next, nil
}

// flush writes ss when it has something unsaved that is due: at once for a count other than
// fired, for this term's first write, or when the last is saveEvery old.
func (s *Scheduler) flush(ctx context.Context, ss *schedState) error {
	if !ss.dirty || !ss.urgent && !ss.savedAt.IsZero() && time.Since(ss.savedAt) < saveEvery {
		return nil
	}
	return s.save(ctx, ss)
}

// troubledNow reports whether storage met trouble since this pass began: its ticks are an
// outage's (walked again by the next pass), and its states are not saved.
func (s *Scheduler) troubledNow() bool { return store.TransientFailures() != s.troubles.Load() }

// walk handles def's due ticks from ss, at most maxTicksPerPass, and returns the next tick.
func (s *Scheduler) walk(ctx context.Context, def *protocol.Schedule, ss *schedState) (time.Time, error) {
	st := &ss.st
	now := s.cfg.Now()
	key := def.Name + "/" + def.UID
	s.mu.Lock()
	reached := s.reached[key]
	s.mu.Unlock()
	since := since(def, st)
	defer func() {
		if since.After(reached) {
			s.mu.Lock()
			s.reached[key] = since
			s.mu.Unlock()
		}
	}()
	if st.Buffered != nil {
		running, err := s.running(ctx, st.LastJob)
		if err != nil {
			return time.Time{}, err
		}
		if !running {
			tick := *st.Buffered
			if err := s.make(ctx, def, ss, tick); err != nil {
				return time.Time{}, err
			}
		}
	}
	for range maxTicksPerPass {
		tick := def.Next(since)
		if tick.IsZero() || tick.After(now) {
			s.prune(ctx, def, ss)
			return tick, nil
		}
		if edge := now.Add(-def.CatchUpWindow()); tick.Before(edge) {
			if made, err := s.madeUnsaved(ctx, def, ss, tick); err != nil || made {
				if err != nil {
					return time.Time{}, err
				}
				since = tick
				continue
			}
			// Missed by more than the catch-up window: counted, not fired.
			n, last, capped := missedRun(def, ss.unsure, tick, MaxMissedCount, func(k time.Time) bool { return k.Before(edge) })
			if capped {
				last = edge.Add(-time.Nanosecond) // the rest are skipped uncounted
			}
			ss.missed(n, last)
			s.log.Warn("schedule ticks missed: older than the catch-up window", "schedule", def.Name, "missed", n, "last", last, "catch_up", def.CatchUpWindow())
			since = last
			continue
		}
		if !tick.Before(s.began) && tick.After(reached) && tick.After(s.troubledAt) && !s.troubledNow() && !def.Next(tick).After(now) {
			// Fell due in this term, not in an outage, and the schedule's next tick is due too:
			// this term fell behind (storage or the box cannot keep up). Every tick but the
			// latest is counted missed, so the ticks that fire are on time and the counts add up.
			if made, err := s.madeUnsaved(ctx, def, ss, tick); err != nil || made {
				if err != nil {
					return time.Time{}, err
				}
				since = tick
				continue
			}
			n, last, _ := missedRun(def, ss.unsure, tick, 0, func(k time.Time) bool { return !def.Next(k).After(now) })
			ss.missed(n, last)
			s.behind.Add(n)
			s.behindOf.Add(1)
			since = last
			continue
		}
		if s.stale() {
			return tick, nil // out of time: the next pass fires it
		}
		if next := def.Next(tick); s.queueWait > 0 && !next.IsZero() && s.queueWait > next.Sub(tick) && tick.After(reached) {
			// Its job would wait in the queue past the schedule's next tick: the cluster is
			// behind its schedules, and queueing more only makes every job later.
			ss.missed(1, tick)
			s.behind.Add(1)
			s.behindOf.Add(1)
			since = tick
			continue
		}
		if def.Overlap != protocol.OverlapAllow {
			running, err := s.running(ctx, st.LastJob)
			if err != nil {
				return time.Time{}, err
			}
			if running {
				if err := s.overlap(ctx, def, ss, tick); err != nil {
					return time.Time{}, err
				}
				since = tick
				continue
			}
		}
		if err := s.make(ctx, def, ss, tick); err != nil {
			return time.Time{}, err
		}
		since = tick
	}
	return def.Next(since), nil
}

// madeUnsaved reports whether an earlier term may have made tick without saving so (it is not
// after ss.unsure) and did: its job exists and is recorded in ss as made.
func (s *Scheduler) madeUnsaved(ctx context.Context, def *protocol.Schedule, ss *schedState, tick time.Time) (bool, error) {
	if tick.After(ss.unsure) {
		return false, nil
	}
	job := protocol.TickJobID(def.Name, def.UID, tick)
	made, err := s.store.Exists(ctx, protocol.SpecBlob(job))
	if err != nil || !made {
		return false, err
	}
	return true, s.made(ctx, def, ss, tick, job)
}

// missedRun counts the run of def's ticks from tick on while in holds, at most limit (0: no
// limit; capped says it was reached). It stops before a later tick an earlier term may have
// made: that one is looked at on its own.
func missedRun(def *protocol.Schedule, unsure, tick time.Time, limit int64, in func(time.Time) bool) (n int64, last time.Time, capped bool) {
	last = tick
	for k := tick; !k.IsZero() && in(k); k = def.Next(k) {
		if limit > 0 && n == limit {
			return n, last, true
		}
		if n > 0 && !k.After(unsure) {
			break
		}
		n, last = n+1, k
	}
	return n, last, false
}

// missed counts n ticks missed, the last of them last.
func (ss *schedState) missed(n int64, last time.Time) {
	ss.st.Missed += n
	ss.st.LastTick = &last
	ss.dirty, ss.urgent = true, true
}

// overlap handles tick while the schedule's previous job runs: buffered (queue, if none is
// yet) or skipped.
func (s *Scheduler) overlap(ctx context.Context, def *protocol.Schedule, ss *schedState, tick time.Time) error {
	st := &ss.st
	if def.Overlap == protocol.OverlapQueue && st.Buffered == nil {
		st.Buffered, st.LastTick = &tick, &tick
		ss.dirty, ss.urgent = true, true
		s.log.Info("schedule tick waits for the previous job", "schedule", def.Name, "tick", tick, "previous", st.LastJob)
		return nil
	}
	job, err := s.claim(ctx, def, tick, "")
	if err != nil {
		return err
	}
	ss.marked = true
	if job != "" { // an earlier term fired it: its decision stands
		return s.made(ctx, def, ss, tick, job)
	}
	st.Skipped++
	st.LastTick = &tick
	ss.dirty, ss.urgent = true, true
	s.log.Info("schedule tick skipped: the previous job still runs", "schedule", def.Name, "tick", tick, "previous", st.LastJob)
	s.emit(core.Event{Kind: core.EventTickSkipped, Epoch: s.fence.Epoch, Job: st.LastJob})
	return nil
}

// make fires tick: claims it (unless every tick fires: overlap allow), writes the job's spec
// and queues the job.
func (s *Scheduler) make(ctx context.Context, def *protocol.Schedule, ss *schedState, tick time.Time) error {
	job := protocol.TickJobID(def.Name, def.UID, tick)
	if def.Overlap == protocol.OverlapAllow {
		return s.made(ctx, def, ss, tick, job)
	}
	job, err := s.claim(ctx, def, tick, job)
	if err != nil {
		return err
	}
	ss.marked = true
	if job == "" { // a term skipped it whose state was not saved with it
		st := &ss.st
		if st.Buffered != nil && st.Buffered.Equal(tick) {
			st.Buffered = nil
		}
		if st.LastTick == nil || tick.After(*st.LastTick) {
			// The stored counts cover the ticks up to LastTick only: this one is counted here.
			st.Skipped++
			st.LastTick = &tick
		}
		ss.dirty, ss.urgent = true, true
		return nil
	}
	return s.made(ctx, def, ss, tick, job)
}

// made creates job for tick (idempotent) and records it in the state.
func (s *Scheduler) made(ctx context.Context, def *protocol.Schedule, ss *schedState, tick time.Time, job string) error {
	created, err := s.create(ctx, def, tick, job)
	if err != nil {
		return err
	}
	st := &ss.st
	if st.Buffered != nil && st.Buffered.Equal(tick) {
		st.Buffered = nil
	}
	if st.LastTick == nil || tick.After(*st.LastTick) {
		st.LastTick = &tick
	}
	st.LastJob = lastJob(def, job) // the tick's run ends with it (overlap)
	st.Fired++
	ss.dirty = true
	if created {
		s.log.Info("schedule tick fired", "schedule", def.Name, "tick", tick, "job", job)
		s.emit(core.Event{Kind: core.EventTickFired, Epoch: s.fence.Epoch, Job: job})
	}
	return nil
}

// claim creates tick's marker with this term's decision (job, or "" to skip) and returns the
// decision that stands: this term's, or an earlier term's. A newer term's marker deposes this one.
func (s *Scheduler) claim(ctx context.Context, def *protocol.Schedule, tick time.Time, job string) (string, error) {
	m := protocol.TickMarker{Schedule: def.Name, UID: def.UID, Tick: tick.UTC(), Job: job, Epoch: s.fence.Epoch, Term: s.fence.ID}
	data, err := m.Encode()
	if err != nil {
		return "", err
	}
	name := protocol.TickBlob(def.Name, def.UID, tick)
	_, err = s.store.Put(ctx, name, data, store.Cond{IfNoneMatch: true})
	if err == nil {
		return job, nil
	}
	if !errors.Is(err, store.ErrExists) {
		return "", fmt.Errorf("claim tick %s: %w", tick.UTC().Format(time.RFC3339), err)
	}
	data, _, err = s.store.Get(ctx, name)
	if err != nil {
		return "", fmt.Errorf("read tick marker: %w", err)
	}
	old, err := protocol.ParseTickMarker(data)
	if err != nil {
		s.log.Warn("unreadable tick marker: the tick's job is made (its id is fixed)", "marker", name, "err", err)
		return protocol.TickJobID(def.Name, def.UID, tick), nil
	}
	if old.Epoch != s.fence.Epoch || old.Term != s.fence.ID {
		if err := s.fence.FencedBy(old.Epoch, old.Term, "tick "+tick.UTC().Format(time.RFC3339)+" of schedule "+def.Name); err != nil {
			return "", err
		}
	}
	if old.Job != "" && old.Job != protocol.TickJobID(def.Name, def.UID, tick) {
		return "", fmt.Errorf("tick marker %s names job %s, not the tick's", name, old.Job)
	}
	return old.Job, nil
}

// create writes the spec of job, and of each later step of def's chain, and queues them. It
// reports whether job's spec was written here.
func (s *Scheduler) create(ctx context.Context, def *protocol.Schedule, tick time.Time, job string) (bool, error) {
	tk := tick.UTC()
	now := s.cfg.Now().UTC()
	created, err := s.createJob(ctx, &protocol.Spec{ID: job, Type: def.Type, Params: def.Params, SubmittedAt: now, Schedule: def.Name, Tick: &tk})
	if err != nil {
		return false, err
	}
	// A chain's steps, in order: each one's predecessor exists before it is queued. A tick fired
	// again (an earlier term died on the way) writes the steps it did not.
	prev := job
	for i, step := range def.Then {
		params, err := step.ParamsAfter(prev)
		if err != nil {
			return created, err
		}
		id := protocol.ChainJobID(job, i+2)
		spec := &protocol.Spec{ID: id, Type: step.Type, Params: params, SubmittedAt: now, After: []string{prev}, Schedule: def.Name, Tick: &tk}
		if _, err := s.createJob(ctx, spec); err != nil {
			return created, err
		}
		prev = id
	}
	return created, nil
}

// lastJob is the last job of the tick whose first job is job: job, or its chain's last step.
func lastJob(def *protocol.Schedule, job string) string {
	if len(def.Then) == 0 {
		return job
	}
	return protocol.ChainJobID(job, len(def.Then)+1)
}

// createJob writes spec (If-None-Match) and queues it. A spec already there is the tick's, made
// by this or an earlier term: it is queued again only if it has not started (a duplicate message
// is harmless, intake plans a job once).
func (s *Scheduler) createJob(ctx context.Context, spec *protocol.Spec) (bool, error) {
	job := spec.ID
	data, err := spec.Encode()
	if err != nil {
		return false, err
	}
	created := true
	if _, err := s.store.Put(ctx, protocol.SpecBlob(job), data, store.Cond{IfNoneMatch: true}); errors.Is(err, store.ErrExists) {
		created = false
		if ok, err := s.store.Exists(ctx, protocol.CheckpointBlob(job)); err != nil {
			return false, err
		} else if ok {
			return false, nil
		}
	} else if err != nil {
		return false, fmt.Errorf("write spec of %s: %w", job, err)
	}
	if err := s.submit.Enqueue(ctx, job); err != nil {
		return false, fmt.Errorf("queue %s: %w", job, err)
	}
	return created, nil
}

// save stores ss (If-Match its ETag, or If-None-Match). On a conflict the stored state is read
// again (errStateReloaded); a newer term's deposes this one.
func (s *Scheduler) save(ctx context.Context, ss *schedState) error {
	if s.cfg.Now().Sub(s.listed) >= saveFor {
		// A DELETE that waited for no leader may have removed the schedule since the listing:
		// writing its state now could leave the blob behind. The next pass writes it, if the
		// schedule is listed.
		return nil
	}
	if s.troubledNow() {
		// Storage was in trouble during this pass: the ticks fired before it may be lost
		// (above). The state stays unsaved; the next pass reads it again and walks them.
		return nil
	}
	ss.st.WriterEpoch, ss.st.WriterTerm, ss.st.UpdatedAt = s.fence.Epoch, s.fence.ID, s.cfg.Now().UTC()
	data, err := ss.st.Encode()
	if err != nil {
		return err
	}
	cond := store.Cond{IfMatch: ss.etag, IfNoneMatch: ss.etag == ""}
	etag, err := s.store.Put(ctx, protocol.ScheduleStateBlob(ss.st.Name), data, cond)
	if err == nil {
		ss.etag, ss.savedAt, ss.dirty, ss.urgent = etag, time.Now(), false, false
		return nil
	}
	if !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrExists) && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("write state of schedule %s: %w", ss.st.Name, err)
	}
	// Someone else's write, or a rollback of this term's: go on from what is stored (a newer
	// term's deposes this one). The ticks since are looked at again; their markers and job ids
	// keep each to one job.
	s.mu.Lock()
	delete(s.states, ss.st.Name)
	s.mu.Unlock()
	if _, err := s.state(ctx, &protocol.Schedule{Name: ss.st.Name, UID: ss.st.UID}); err != nil {
		return err
	}
	return errStateReloaded
}

// errStateReloaded: a schedule's stored state was not this term's; it was read again, and the
// schedule's ticks are looked at again from it in the next pass.
var errStateReloaded = errors.New("schedule state changed in storage; read again")

// running reports whether job (the schedule's last) has not ended. It reads markers, not the
// job's checkpoint, unless neither says.
func (s *Scheduler) running(ctx context.Context, job string) (bool, error) {
	if job == "" {
		return false, nil
	}
	state, err := s.reader.JobState(ctx, job)
	if err != nil {
		return false, err
	}
	return state != "" && !state.Terminal(), nil
}

// prune deletes def's tick markers older than tickKeep, at most once a pruneEvery: once in a
// term (a pruneEvery after the state was read), then while the term claims markers.
func (s *Scheduler) prune(ctx context.Context, def *protocol.Schedule, ss *schedState) {
	if time.Since(ss.lastPrune) < pruneEvery || ss.st.LastTick == nil || ss.pruned && !ss.marked {
		return
	}
	ss.lastPrune, ss.pruned, ss.marked = time.Now(), true, false
	prefix := protocol.ScheduleTicksOf(def.Name) + def.UID + "/"
	marks, err := s.store.List(ctx, prefix)
	if err != nil {
		return
	}
	edge := ss.st.LastTick.Add(-tickKeep)
	var old []jobs.BlobInfo
	for _, m := range marks {
		at, err := time.Parse("20060102T150405Z", strings.TrimPrefix(m.Name, prefix))
		if err == nil && at.Before(edge) {
			old = append(old, m)
		}
	}
	_ = s.deleteAll(ctx, old)
}

// New returns the scheduler of a term: its writes fenced by f, its jobs queued through submit.
func New(f *fence.Fence, log *slog.Logger, emit func(core.Event), cfg core.Config, st core.Store, reader jobread.Reader, submit submitter) *Scheduler {
	s := &Scheduler{fence: f, log: log, emit: emit, cfg: cfg, store: st, reader: reader, submit: submit, states: map[string]*schedState{}, defs: map[string]cachedDef{}, reached: map[string]time.Time{}, began: cfg.Now()}
	s.troubles.Store(store.TransientFailures())
	return s
}
