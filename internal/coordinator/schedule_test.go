package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/coordinator/schedule"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// scheduleJobs returns the jobs schedule name made, by tick.
func (r *rig) scheduleJobs(name string) map[time.Time][]string {
	r.t.Helper()
	blobs, err := r.st.List(context.Background(), "")
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[time.Time][]string{}
	for _, b := range blobs {
		if !strings.HasSuffix(b.Name, "/spec.json") {
			continue
		}
		data, _, err := r.st.Get(context.Background(), b.Name)
		if err != nil {
			r.t.Fatal(err)
		}
		spec, err := protocol.ParseSpec(data)
		if err != nil {
			r.t.Fatal(err)
		}
		if spec.Schedule == name {
			out[spec.Tick.UTC()] = append(out[spec.Tick.UTC()], spec.ID)
		}
	}
	return out
}

func (r *rig) addSchedule(name string, o client.ScheduleOptions) {
	r.t.Helper()
	if _, err := r.cl.AddSchedule(context.Background(), name, o); err != nil {
		r.t.Fatal(err)
	}
}

func eventually(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// contiguous asserts ticks are every step apart with none missing, and one job each.
func contiguous(t *testing.T, byTick map[time.Time][]string, step time.Duration) []time.Time {
	t.Helper()
	var ticks []time.Time
	for tk, ids := range byTick {
		if len(ids) != 1 {
			t.Errorf("tick %v made %d jobs: %v", tk, len(ids), ids)
		}
		ticks = append(ticks, tk)
	}
	sort.Slice(ticks, func(i, j int) bool { return ticks[i].Before(ticks[j]) })
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != step {
			t.Errorf("ticks %v and %v are %v apart, want %v (a tick missing)", ticks[i-1], ticks[i], d, step)
		}
	}
	return ticks
}

// A schedule's ticks each make one job while leaders replace each other: gracefully, abruptly,
// two at once (a deposed leader that does not know it yet) and after a storage rollback of the
// schedule's state and markers.
func TestSchedule_OneJobPerTickAcrossLeaders(t *testing.T) {
	r := newRig(t)
	r.work(worker.Config{})
	fast := func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond }
	r.addSchedule("every", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow, CatchUp: time.Minute})

	l := r.leadWith(1, fast)
	time.Sleep(2500 * time.Millisecond)
	if err := l.stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond) // leaderless: its ticks are caught up
	// Two leaders at once: epoch 2 is deposed by epoch 3 and must stop without a second job.
	l2 := r.leadWith(2, fast)
	time.Sleep(1200 * time.Millisecond)
	l3 := r.leadWith(3, fast)
	select {
	case <-l2.done:
		if !errors.Is(l2.err, ErrDeposed) {
			t.Fatalf("epoch 2 ended with %v, want ErrDeposed", l2.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("epoch 2 did not yield to epoch 3")
	}
	time.Sleep(1500 * time.Millisecond)
	if err := l3.stop(); err != nil {
		t.Fatal(err)
	}
	// A storage rollback: the state and the last markers are lost; the jobs stay.
	ctx := context.Background()
	data, _, err := r.st.Get(ctx, protocol.ScheduleStateBlob("every"))
	if err != nil {
		t.Fatal(err)
	}
	st, err := protocol.ParseScheduleState(data)
	if err != nil {
		t.Fatal(err)
	}
	back := st.LastTick.Add(-3 * time.Second)
	st.LastTick = &back
	b, _ := st.Encode()
	if _, err := r.st.Put(ctx, protocol.ScheduleStateBlob("every"), b, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	marks, _ := r.st.List(ctx, protocol.ScheduleTicksOf("every"))
	for _, m := range marks[max(len(marks)-2, 0):] {
		_ = r.st.Delete(ctx, m.Name)
	}
	l4 := r.leadWith(4, fast)
	time.Sleep(2500 * time.Millisecond)
	if err := l4.stop(); err != nil {
		t.Fatal(err)
	}

	ticks := contiguous(t, r.scheduleJobs("every"), time.Second)
	if len(ticks) < 8 {
		t.Fatalf("%d ticks fired, want at least 8", len(ticks))
	}
	// Every job ran once, and shows its schedule and tick.
	l5 := r.lead(5)
	defer l5.stop()
	for _, ids := range r.scheduleJobs("every") {
		s := r.wait(ids[0], 20*time.Second)
		if s.State != jobs.StateSucceeded || s.Schedule != "every" || s.Tick == nil {
			t.Fatalf("job %s: %+v", ids[0], s)
		}
	}
	infos, err := r.cl.Schedules(ctx)
	if err != nil || len(infos) != 1 || infos[0].LastTick == nil || infos[0].NextTick == nil || infos[0].Fired < int64(len(ticks)) {
		t.Fatalf("schedule list: %+v %v", infos, err)
	}
}

// Overlap skip makes no job while the previous one runs; queue keeps one tick for after it.
func TestSchedule_Overlap(t *testing.T) {
	for _, c := range []struct {
		policy string
		min    int
		max    int
	}{{protocol.OverlapSkip, 1, 1}, {protocol.OverlapQueue, 2, 2}} {
		t.Run(c.policy, func(t *testing.T) {
			r := newRig(t)
			// No worker: the first job never ends.
			r.addSchedule("o", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: c.policy})
			var skipped sync.WaitGroup
			skipped.Add(2)
			var once [2]sync.Once
			n := 0
			var mu sync.Mutex
			r.leadWith(1, func(cfg *Config) {
				cfg.ScheduleInterval = 50 * time.Millisecond
				cfg.OnEvent = func(ev Event) {
					if ev.Kind == EventTickSkipped {
						mu.Lock()
						if n < 2 {
							once[n].Do(skipped.Done)
						}
						n++
						mu.Unlock()
					}
				}
			})
			done := make(chan struct{})
			go func() { skipped.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("no tick skipped")
			}
			if got := len(r.scheduleJobs("o")); got != 1 {
				t.Fatalf("%d jobs while the first runs, want 1", got)
			}
			if c.policy == protocol.OverlapQueue {
				info, err := r.cl.Schedule(context.Background(), "o")
				if err != nil || info.Buffered == nil {
					t.Fatalf("queue policy: no buffered tick: %+v %v", info, err)
				}
				// The first job ends: the buffered tick fires.
				r.work(worker.Config{})
				eventually(t, 20*time.Second, "the buffered tick fires", func() bool { return len(r.scheduleJobs("o")) >= 2 })
			}
		})
	}
}

// Ticks missed while there was no leader fire within the catch-up window; older ones are
// counted as missed. A paused schedule fires nothing.
func TestSchedule_CatchUpAndPause(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	s := &protocol.Schedule{Name: "late", UID: "u1", Every: "1s", Type: "sleep", Params: json.RawMessage(`{"shards":1}`),
		Overlap: protocol.OverlapAllow, CatchUp: "10s", CreatedAt: time.Now().Add(-30 * time.Second).UTC()}
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, protocol.ScheduleBlob("late"), data, store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	r.addSchedule("paused", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`)})
	if err := r.cl.PauseSchedule(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	r.leadWith(1, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	eventually(t, 10*time.Second, "catch-up", func() bool { return len(r.scheduleJobs("late")) >= 10 })
	time.Sleep(time.Second)
	ticks := contiguous(t, r.scheduleJobs("late"), time.Second)
	if first := ticks[0]; began.Sub(first) > 11*time.Second {
		t.Fatalf("first tick %v before the leader began: beyond the catch-up window of 10s", began.Sub(first))
	}
	info, err := r.cl.Schedule(ctx, "late")
	if err != nil || info.Missed < 15 {
		t.Fatalf("missed ticks not counted: %+v %v", info, err)
	}
	if got := len(r.scheduleJobs("paused")); got != 0 {
		t.Fatalf("a paused schedule made %d jobs", got)
	}
	if err := r.cl.ResumeSchedule(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "resumed schedule fires", func() bool { return len(r.scheduleJobs("paused")) >= 1 })
	for tk := range r.scheduleJobs("paused") {
		if tk.Before(time.Now().Add(-5 * time.Second)) {
			t.Fatalf("tick %v while paused was caught up", tk)
		}
	}
	// Delete stops it; trigger of a deleted schedule is refused.
	if _, err := r.cl.DeleteSchedule(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.cl.TriggerSchedule(ctx, "paused"); !errors.Is(err, client.ErrNoSuchSchedule) {
		t.Fatalf("trigger of a deleted schedule: %v", err)
	}
	id, err := r.cl.TriggerSchedule(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if st, err := r.cl.Status(ctx, id); err != nil || st.Schedule != "late" || st.Tick == nil {
		t.Fatalf("triggered job: %+v %v", st, err)
	}
	// The schedules' blobs are not jobs.
	list, err := r.cl.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range list {
		if st.Schedule == "" && st.ID != "" {
			t.Errorf("listed as a job: %+v", st)
		}
	}
}

// A leader that finds a tick claimed by a newer term (a higher epoch, or its own epoch under
// another term: the lease's epoch went back in a storage rollback) yields and makes no job.
func TestSchedule_TickMarkerOfNewerTermDeposes(t *testing.T) {
	for _, c := range []struct {
		name  string
		epoch uint64
		term  string
	}{{"higher epoch", 7, "other"}, {"same epoch, other term", 3, "other"}} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(t)
			ctx := context.Background()
			// Overlap skip: its ticks are claimed with markers (a schedule whose every tick fires
			// has none: the tick's job id alone keeps it to one job).
			r.addSchedule("fenced", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapSkip})
			data, _, err := r.st.Get(ctx, protocol.ScheduleBlob("fenced"))
			if err != nil {
				t.Fatal(err)
			}
			def, err := protocol.ParseSchedule(data)
			if err != nil {
				t.Fatal(err)
			}
			// The newer term claimed the first few ticks, and made no job yet. (From the
			// schedule's creation, not from now: a second may have passed since.)
			for tick := def.Next(def.CreatedAt); tick.Before(time.Now().Add(4 * time.Second)); tick = def.Next(tick) {
				m := protocol.TickMarker{Schedule: "fenced", UID: def.UID, Tick: tick, Job: protocol.TickJobID("fenced", def.UID, tick), Epoch: c.epoch, Term: c.term}
				b, _ := m.Encode()
				if _, err := r.st.Put(ctx, protocol.TickBlob("fenced", def.UID, tick), b, store.Cond{IfNoneMatch: true}); err != nil {
					t.Fatal(err)
				}
			}
			l := r.leadWith(3, func(cfg *Config) { cfg.ScheduleInterval = 50 * time.Millisecond })
			select {
			case <-l.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the term did not yield")
			}
			if !errors.Is(l.err, ErrDeposed) {
				t.Fatalf("Lead: %v, want ErrDeposed", l.err)
			}
			if got := r.scheduleJobs("fenced"); len(got) != 0 {
				t.Fatalf("a deposed term made jobs: %v", got)
			}
		})
	}
}

// A schedule every second whose last tick is a month old counts its missed ticks and fires the
// recent ones without stalling the stage.
func TestSchedule_LongOutage(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	s := &protocol.Schedule{Name: "old", UID: "u1", Every: "1s", Type: "sleep", Params: json.RawMessage(`{"shards":1}`),
		Overlap: protocol.OverlapAllow, CatchUp: "10s", CreatedAt: time.Now().Add(-30 * 24 * time.Hour).UTC()}
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, protocol.ScheduleBlob("old"), data, store.Cond{IfNoneMatch: true}); err != nil {
		t.Fatal(err)
	}
	r.leadWith(1, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	eventually(t, 20*time.Second, "recent ticks fire", func() bool { return len(r.scheduleJobs("old")) >= 5 })
	// The state is written at the end of the pass that counted the missed ticks.
	var info *client.ScheduleInfo
	eventually(t, 10*time.Second, "missed ticks counted", func() bool {
		info, err = r.cl.Schedule(ctx, "old")
		return err == nil && info.Missed >= schedule.MaxMissedCount
	})
	if info.Missed > schedule.MaxMissedCount+10 {
		t.Fatalf("missed: %+v", info)
	}
}

// A storage rollback under a leader that stays: the schedule's state goes back and the last
// ticks' markers and jobs vanish. The leader notices (the stored state is not its own), goes on
// from the stored state, and makes the lost ticks' jobs again: none missing, none twice.
func TestSchedule_RollbackUnderTheSameLeader(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addSchedule("rb", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow, CatchUp: time.Minute})
	r.leadWith(1, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	// The stored state covers three ticks' jobs (it is written at most every 5 s).
	var st *protocol.ScheduleState
	var byTick map[time.Time][]string
	eventually(t, 30*time.Second, "a stored state past three ticks", func() bool {
		data, _, err := r.st.Get(ctx, protocol.ScheduleStateBlob("rb"))
		if err != nil {
			return false
		}
		if st, err = protocol.ParseScheduleState(data); err != nil || st.LastTick == nil {
			return false
		}
		byTick = r.scheduleJobs("rb")
		n := 0
		for tk := range byTick {
			if !tk.After(*st.LastTick) {
				n++
			}
		}
		return n >= 3
	})
	// Roll back: the state as it was two ticks ago (an old copy, written unconditionally: a new
	// ETag the leader never saw), the last two ticks' markers and specs gone.
	var lost []time.Time
	for k := *st.LastTick; len(lost) < 2; k = k.Add(-time.Second) {
		if ids, ok := byTick[k]; ok {
			lost = append(lost, k)
			_ = r.st.Delete(ctx, protocol.SpecBlob(ids[0]))
		}
	}
	def, _, _ := r.st.Get(ctx, protocol.ScheduleBlob("rb"))
	d, err := protocol.ParseSchedule(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range lost {
		_ = r.st.Delete(ctx, protocol.TickBlob("rb", d.UID, k))
	}
	back := lost[len(lost)-1].Add(-time.Second)
	st.LastTick = &back
	b, _ := st.Encode()
	if _, err := r.st.Put(ctx, protocol.ScheduleStateBlob("rb"), b, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the lost ticks' jobs made again", func() bool {
		got := r.scheduleJobs("rb")
		for _, k := range lost {
			if len(got[k]) != 1 {
				return false
			}
		}
		return true
	})
	time.Sleep(1500 * time.Millisecond)
	contiguous(t, r.scheduleJobs("rb"), time.Second)
}

// slowSpecs delays every write of a job's spec: a leader whose storage cannot keep up.
type slowSpecs struct {
	Store
	by time.Duration
}

func (s *slowSpecs) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	if strings.HasSuffix(name, "/spec.json") {
		time.Sleep(s.by)
	}
	return s.Store.Put(ctx, name, data, cond)
}

// A leader that falls behind (each tick's spec takes 2.5 s to write, a schedule ticks every
// second) does not fire ticks later and later: a tick still unfired when the schedule's next
// tick is due is counted missed, each pass fires the latest due tick, and the counts add up to
// the due ticks exactly. Before, every tick fired, each later than the one before.
func TestSchedule_FallenBehindCountsMissed(t *testing.T) {
	r := newRig(t)
	r.addSchedule("behind", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow})
	r.leadOn(1, &slowSpecs{Store: r.st, by: 2500 * time.Millisecond}, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	st := r.scheduleStateWhen("behind", 60*time.Second, "ticks missed and fired", func(st *protocol.ScheduleState) bool {
		return st.Missed >= 4 && st.Fired >= 4
	})
	d, due, fired := r.tickCounts("behind", st)
	if got := fired + int(st.Skipped+st.Missed); got != due {
		t.Errorf("fired %d + skipped %d + missed %d = %d, want the %d due ticks", fired, st.Skipped, st.Missed, got, due)
	}
	// Each fired tick was the latest due when its pass reached it: it is written within a
	// tick's interval plus one write, never a growing backlog behind.
	for _, sp := range r.scheduleSpecs()["behind"] {
		if late := sp.SubmittedAt.Sub(*sp.Tick); sp.Tick.After(d.CreatedAt.Add(3*time.Second)) && late > 4*time.Second {
			t.Errorf("tick %v fired %v late", sp.Tick, late)
		}
	}
}

// heldSpecs holds every spec write while held is set, as a storage outage does.
type heldSpecs struct {
	Store
	held atomic.Bool
}

func (s *heldSpecs) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	for strings.HasSuffix(name, "/spec.json") && s.held.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	return s.Store.Put(ctx, name, data, cond)
}

// Ticks that fell due while storage was out (spec writes held 3 s, transient failures counted)
// are the catch-up window's: each fires when storage is back, none is counted missed as if the
// scheduler had fallen behind. Before, the fell-behind rule counted all but the latest missed.
func TestSchedule_OutageTicksCatchUp(t *testing.T) {
	r := newRig(t)
	r.addSchedule("outage", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`),
		Overlap: protocol.OverlapAllow, CatchUp: time.Minute})
	held := &heldSpecs{Store: r.st}
	r.leadOn(1, held, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	before := r.scheduleStateWhen("outage", 30*time.Second, "ticks fired", func(st *protocol.ScheduleState) bool { return st.Fired >= 2 })
	held.held.Store(true)
	time.Sleep(2 * time.Second)
	storageTrouble(t) // 1.5 s more
	held.held.Store(false)
	st := r.scheduleStateWhen("outage", 30*time.Second, "ticks fired after the outage", func(st *protocol.ScheduleState) bool {
		return st.Fired >= before.Fired+6
	})
	if st.Missed != 0 {
		t.Errorf("%d ticks counted missed, want 0: the outage's ticks are caught up", st.Missed)
	}
	_, due, fired := r.tickCounts("outage", st)
	if fired+int(st.Skipped) != due {
		t.Errorf("fired %d + skipped %d, want the %d due ticks", fired, st.Skipped, due)
	}
}

// A DELETE returns the schedule's final counts, and they add up to its due ticks exactly,
// although the leader is behind (each tick's spec takes 2.5 s to write, the schedule ticks every
// second): the ticks due up to the DELETE that the leader had not handled are counted missed in
// the final state, which the DELETE reads and removes.
func TestSchedule_DeleteReturnsFinalCounts(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.addSchedule("final", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow})
	r.leadOn(1, &slowSpecs{Store: r.st, by: 2500 * time.Millisecond}, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	r.scheduleStateWhen("final", 60*time.Second, "ticks fired", func(st *protocol.ScheduleState) bool { return st.Fired >= 2 })
	asked := time.Now()
	data, _, err := r.st.Get(ctx, protocol.ScheduleBlob("final"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := protocol.ParseSchedule(data)
	if err != nil {
		t.Fatal(err)
	}
	info, err := r.cl.DeleteSchedule(ctx, "final")
	if err != nil {
		t.Fatal(err)
	}
	through := asked
	if info.LastTick != nil && info.LastTick.After(through) {
		through = *info.LastTick
	}
	due := 0
	for tk := d.Next(d.CreatedAt); !tk.After(through); tk = d.Next(tk) {
		due++
	}
	made := 0
	for tk := range r.scheduleJobs("final") {
		if !tk.After(through) {
			made++
		}
	}
	if info.Fired != int64(made) || made+int(info.Skipped+info.Missed) != due {
		t.Errorf("final counts fired %d (jobs %d) + skipped %d + missed %d, want the %d due ticks through %v", info.Fired, made, info.Skipped, info.Missed, due, through)
	}
	if info.Missed == 0 {
		t.Errorf("no tick counted missed behind a leader 2.5 s a tick: %+v", info)
	}
	for _, prefix := range []string{protocol.ScheduleDefsPrefix, protocol.ScheduleStatePrefix, protocol.ScheduleTicksOf("final")} {
		if left, err := r.st.List(ctx, prefix); err != nil || len(left) > 0 {
			t.Errorf("left under %s: %v (%v)", prefix, left, err)
		}
	}
}

// A schedule state without a definition (a DELETE's final state its client never took) is
// removed by the leader once it has seen it so for protocol.FinalKeep; a defined schedule's
// state stays.
func TestSchedule_OrphanStateRemovedAfterFinalKeep(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	ghost, err := (&protocol.ScheduleState{Name: "ghost", UID: "u1", Final: true, Fired: 3}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.st.Put(ctx, protocol.ScheduleStateBlob("ghost"), ghost, store.Cond{}); err != nil {
		t.Fatal(err)
	}
	r.addSchedule("kept", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow})
	var skew atomic.Int64
	r.leadWith(1, func(c *Config) {
		c.ScheduleInterval = 50 * time.Millisecond
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	r.scheduleStateWhen("kept", 20*time.Second, "the kept schedule's state", func(st *protocol.ScheduleState) bool { return st.Fired >= 1 })
	if ok, err := r.st.Exists(ctx, protocol.ScheduleStateBlob("ghost")); err != nil || !ok {
		t.Fatalf("the orphan state removed before FinalKeep (exists %v, err %v)", ok, err)
	}
	skew.Store(int64(protocol.FinalKeep + time.Minute))
	eventually(t, 20*time.Second, "the orphan state removed", func() bool {
		ok, err := r.st.Exists(ctx, protocol.ScheduleStateBlob("ghost"))
		return err == nil && !ok
	})
	if ok, err := r.st.Exists(ctx, protocol.ScheduleStateBlob("kept")); err != nil || !ok {
		t.Fatalf("a defined schedule's state removed (exists %v, err %v)", ok, err)
	}
}

// A cluster that cannot take jobs in (its one active slot held by a long job, five jobs queued
// behind it) makes a schedule every second count its ticks missed instead of queueing jobs that
// would start after their next tick: the queue's depth over intake's rate (at least one a
// second) is longer than the interval. The counts still add up to the due ticks.
func TestSchedule_DeepQueueCountsMissed(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.leadWith(1, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond; c.MaxActiveJobs = 1 })
	r.work(worker.Config{ID: "w1", Concurrency: 1})
	long := r.submit("sleep", `{"shards":1,"duration":"1m"}`)
	eventually(t, 20*time.Second, "the long job running", func() bool {
		st, err := r.cl.Status(ctx, long)
		return err == nil && st.State == jobs.StateRunning
	})
	for range 5 {
		r.submit("sleep", `{"shards":1}`)
	}
	r.addSchedule("deep", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow})
	st := r.scheduleStateWhen("deep", 30*time.Second, "ticks missed behind the deep queue", func(st *protocol.ScheduleState) bool {
		return st.Missed >= 4
	})
	_, due, fired := r.tickCounts("deep", st)
	// The first pass has no rate yet and may fire one tick; the rest wait behind the queue.
	if fired > 2 {
		t.Errorf("%d ticks fired into a queue of 5 that nothing takes", fired)
	}
	if fired+int(st.Skipped+st.Missed) != due {
		t.Errorf("fired %d + skipped %d + missed %d, want the %d due ticks", fired, st.Skipped, st.Missed, due)
	}
}

// Messages a deposed term received and did not delete stay hidden until their visibility ends;
// the queue counts them. They are no backlog: intake's receives find nothing, so a tick fires
// (before, the deep-queue rule took them for jobs waiting, with intake's rate at its floor of
// one a second, and counted ticks missed after a takeover: the schedule-blob-kill chaos fault).
func TestSchedule_HiddenMessagesAreNoBacklog(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	for range 5 {
		if err := r.q.Enqueue(ctx, protocol.NewID(time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	if msgs, err := r.q.Receive(ctx, 5, time.Minute); err != nil || len(msgs) != 5 {
		t.Fatalf("received %d of 5 messages to hide, err %v", len(msgs), err)
	}
	r.addSchedule("hidden", client.ScheduleOptions{Every: time.Second, Type: "sleep", Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow})
	r.leadWith(1, func(c *Config) { c.ScheduleInterval = 50 * time.Millisecond })
	st := r.scheduleStateWhen("hidden", 30*time.Second, "ticks fired beside hidden messages", func(st *protocol.ScheduleState) bool {
		return st.Fired >= 5
	})
	if st.Missed != 0 {
		t.Errorf("%d ticks counted missed behind 5 hidden messages, want 0", st.Missed)
	}
}

// scheduleStateWhen waits up to within for schedule name's stored state to have a last tick
// and satisfy ok, and returns it.
func (r *rig) scheduleStateWhen(name string, within time.Duration, what string, ok func(*protocol.ScheduleState) bool) *protocol.ScheduleState {
	r.t.Helper()
	var st *protocol.ScheduleState
	eventually(r.t, within, what, func() bool {
		data, _, err := r.st.Get(context.Background(), protocol.ScheduleStateBlob(name))
		if err != nil {
			return false
		}
		st, err = protocol.ParseScheduleState(data)
		return err == nil && st.LastTick != nil && ok(st)
	})
	return st
}

// tickCounts returns schedule name's definition, its ticks due up to st's last tick, and how
// many of those made a job; a tick that made more than one fails the test.
func (r *rig) tickCounts(name string, st *protocol.ScheduleState) (d *protocol.Schedule, due, fired int) {
	r.t.Helper()
	data, _, err := r.st.Get(context.Background(), protocol.ScheduleBlob(name))
	if err != nil {
		r.t.Fatal(err)
	}
	if d, err = protocol.ParseSchedule(data); err != nil {
		r.t.Fatal(err)
	}
	for tk := d.Next(d.CreatedAt); !tk.After(*st.LastTick); tk = d.Next(tk) {
		due++
	}
	for tk, ids := range r.scheduleJobs(name) {
		if len(ids) != 1 {
			r.t.Errorf("tick %v made %d jobs", tk, len(ids))
		}
		if !tk.After(*st.LastTick) {
			fired++
		}
	}
	return d, due, fired
}
