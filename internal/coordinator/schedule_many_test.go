package coordinator

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Schedules at hundreds: N schedules every second (overlap allow) for a while, then all deleted
// at once. Every due tick up to the DELETE makes one job (fired + skipped + missed = due ticks,
// ± 1 a schedule), no job is made after a DELETE is acknowledged, nothing of a deleted schedule
// stays in storage and the term does not end. 10 schedules for 5 s in the normal run;
// MAPAGG_SCHEDULES_MANY=300x60s (schedules x duration) is the load case, which also holds the
// median lateness (a job's spec written after its tick) to a second (the load test's schedules
// scenario measures it too). It logs one line of figures and the leader's storage requests.
func TestSchedule_ManyEverySecond(t *testing.T) {
	n, d, heavy := 10, 5*time.Second, false
	if v := os.Getenv("MAPAGG_SCHEDULES_MANY"); v != "" {
		m := regexp.MustCompile(`^(\d+)x(\S+)$`).FindStringSubmatch(v)
		if m == nil {
			t.Fatalf("MAPAGG_SCHEDULES_MANY=%q: want schedules x duration, as 300x60s", v)
		}
		var err error
		if n, err = strconv.Atoi(m[1]); err != nil || n < 1 {
			t.Fatalf("MAPAGG_SCHEDULES_MANY=%q: bad count", v)
		}
		if d, err = time.ParseDuration(m[2]); err != nil || d < time.Second {
			t.Fatalf("MAPAGG_SCHEDULES_MANY=%q: bad duration", v)
		}
		heavy = n >= 100
	}
	r := newRig(t)
	ctx := context.Background()
	var termsEnded atomic.Int64
	tally := &tallyStore{Store: r.st, n: map[string]*tallyOf{}}
	r.leadOn(1, tally, func(c *Config) {
		c.OnEvent = func(ev Event) {
			if ev.Kind == EventTermEnded {
				termsEnded.Add(1)
				t.Logf("term ended: %v", ev.Err)
			}
		}
	})
	r.work(worker.Config{ID: "w1", Concurrency: 4})

	names := make([]string, n)
	defs := make([]*protocol.Schedule, n)
	each(t, n, func(i int) error {
		names[i] = fmt.Sprintf("many-%03d", i)
		if _, err := r.cl.AddSchedule(ctx, names[i], client.ScheduleOptions{Every: time.Second, Type: "sleep",
			Params: json.RawMessage(`{"shards":1}`), Overlap: protocol.OverlapAllow}); err != nil {
			return err
		}
		data, _, err := r.st.Get(ctx, protocol.ScheduleBlob(names[i]))
		if err != nil {
			return err
		}
		defs[i], err = protocol.ParseSchedule(data)
		return err
	})
	time.Sleep(d)

	// Delete them all at once; each DELETE's start bounds the ticks due, its return is the
	// acknowledgement.
	asked, acked := make([]time.Time, n), make([]time.Time, n)
	infos := make([]*client.ScheduleInfo, n)
	each(t, n, func(i int) error {
		var err error
		asked[i] = time.Now()
		if infos[i], err = r.cl.DeleteSchedule(ctx, names[i]); err != nil {
			return err
		}
		acked[i] = time.Now()
		// The final counts are through the DELETE's mark, a little after asked: the ticks
		// between are counted too.
		if lt := infos[i].LastTick; lt != nil && lt.After(asked[i]) {
			asked[i] = *lt
		}
		return nil
	})
	time.Sleep(3 * time.Second) // a tick fired after an acknowledgement would show by now
	ended := termsEnded.Load()

	var due, fired, counted, off int
	var late []time.Duration
	after, holes := 0, 0
	specs := r.scheduleSpecs()
	for i, name := range names {
		byTick := map[time.Time][]*protocol.Spec{}
		for _, sp := range specs[name] {
			byTick[sp.Tick.UTC()] = append(byTick[sp.Tick.UTC()], sp)
		}
		ticks, gap := 0, false
		for tk := defs[i].Next(defs[i].CreatedAt); !tk.After(asked[i]); tk = defs[i].Next(tk) {
			ticks++
			if byTick[tk] == nil {
				gap = true
			} else if gap && infos[i].Skipped+infos[i].Missed == 0 {
				holes++ // a tick made after an earlier one that was neither made nor counted
				gap = false
			}
		}
		made := 0
		for tk, ids := range byTick {
			if len(ids) != 1 {
				t.Errorf("%s: tick %v made %d jobs", name, tk, len(ids))
			}
			if !tk.After(asked[i]) {
				made++
			}
			for _, spec := range ids {
				late = append(late, spec.SubmittedAt.Sub(tk))
				if spec.SubmittedAt.After(acked[i]) {
					after++
				}
			}
		}
		due += ticks
		fired += made
		counted += int(infos[i].Skipped + infos[i].Missed)
		if diff := made + int(infos[i].Skipped+infos[i].Missed) - ticks; diff < -1 || diff > 1 {
			off++
		}
	}
	var left []string
	for _, prefix := range []string{protocol.ScheduleDefsPrefix, protocol.ScheduleStatePrefix, protocol.ScheduleTicksPrefix} {
		blobs, err := r.st.List(ctx, prefix)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blobs {
			if strings.Contains(b.Name, "many-") {
				left = append(left, b.Name)
			}
		}
	}
	slices.Sort(late)
	median, worst := time.Duration(0), time.Duration(0)
	if len(late) > 0 {
		median, worst = late[len(late)/2], late[len(late)-1]
	}
	t.Logf("schedules %d every 1s for %v: due %d, fired %d, skipped+missed %d, schedules off by more than 1: %d; lateness median %v, worst %v; jobs after delete %d; blobs left %d; terms ended %d",
		n, d, due, fired, counted, off, median.Round(time.Millisecond), worst.Round(time.Millisecond), after, len(left), ended)
	t.Logf("the leader's storage requests:\n%s", tally)
	// Ticks fire in order: none is lost before a later one fires, however slow the box.
	if holes > 0 {
		t.Errorf("%d ticks were neither made nor counted while a later tick of theirs was made", holes)
	}
	if fired == 0 {
		t.Error("no tick made a job")
	}
	// Keeping up with every due tick up to the DELETE is speed: judged in the load case only
	// (MAPAGG_SCHEDULES_MANY, the load test's schedules scenario).
	if off > 0 && os.Getenv("MAPAGG_SCHEDULES_MANY") != "" {
		t.Errorf("%d schedules' fired + skipped + missed differ from their due ticks by more than one", off)
	}
	if after > 0 {
		t.Errorf("%d jobs made after their schedule's DELETE was acknowledged", after)
	}
	if len(left) > 0 {
		t.Errorf("%d blobs of deleted schedules left, as %s", len(left), left[0])
	}
	if ended > 0 {
		t.Errorf("the term ended %d times", ended)
	}
	if heavy && median > time.Second {
		t.Errorf("median lateness %v, want at most 1s", median)
	}
}

// each runs f(0..n-1), 16 at a time, and fails t on the first error.
func each(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// scheduleSpecs returns the specs of the jobs schedules made, by schedule.
func (r *rig) scheduleSpecs() map[string][]*protocol.Spec {
	r.t.Helper()
	blobs, err := r.st.List(context.Background(), "")
	if err != nil {
		r.t.Fatal(err)
	}
	var names []string
	for _, b := range blobs {
		if strings.HasSuffix(b.Name, "/spec.json") {
			names = append(names, b.Name)
		}
	}
	var mu sync.Mutex
	out := map[string][]*protocol.Spec{}
	each(r.t.(*testing.T), len(names), func(i int) error {
		data, _, err := r.st.Get(context.Background(), names[i])
		if err != nil {
			return err
		}
		spec, err := protocol.ParseSpec(data)
		if err != nil || spec.Schedule == "" {
			return err
		}
		mu.Lock()
		out[spec.Schedule] = append(out[spec.Schedule], spec)
		mu.Unlock()
		return nil
	})
	return out
}

// tallyStore counts the leader's storage calls and their time, by operation and kind of blob.
type tallyStore struct {
	Store
	mu sync.Mutex
	n  map[string]*tallyOf
}

type tallyOf struct {
	calls int
	took  time.Duration
}

func (c *tallyStore) note(op, name string, start time.Time) {
	kind := "job"
	for _, p := range []string{protocol.ScheduleDefsPrefix, protocol.ScheduleStatePrefix, protocol.ScheduleTicksPrefix} {
		if strings.HasPrefix(name, p) {
			kind = p
		}
	}
	if parts := strings.Split(name, "/"); kind == "job" && len(parts) > 1 {
		if first := parts[0]; first != "" && first[0] >= '0' && first[0] <= '9' {
			kind = "job/" + parts[len(parts)-1] // <job id>/spec.json, ...
		} else {
			kind = first + "/" // active/<job id>, ended/..., ...
		}
	}
	took := time.Since(start)
	c.mu.Lock()
	defer c.mu.Unlock()
	k := op + " " + kind
	if c.n[k] == nil {
		c.n[k] = &tallyOf{}
	}
	c.n[k].calls++
	c.n[k].took += took
}

func (c *tallyStore) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var lines []string
	for k, v := range c.n {
		lines = append(lines, fmt.Sprintf("%8d %10v  %s", v.calls, (v.took/time.Duration(v.calls)).Round(time.Millisecond), k))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

func (c *tallyStore) Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error) {
	defer c.note("put", name, time.Now())
	return c.Store.Put(ctx, name, data, cond)
}

func (c *tallyStore) PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error) {
	defer c.note("putmeta", name, time.Now())
	return c.Store.PutMeta(ctx, name, data, meta, cond)
}

func (c *tallyStore) Delete(ctx context.Context, name string) error {
	defer c.note("delete", name, time.Now())
	return c.Store.Delete(ctx, name)
}

func (c *tallyStore) Get(ctx context.Context, name string) ([]byte, store.ETag, error) {
	defer c.note("get", name, time.Now())
	return c.Store.Get(ctx, name)
}

func (c *tallyStore) Exists(ctx context.Context, name string) (bool, error) {
	defer c.note("exists", name, time.Now())
	return c.Store.Exists(ctx, name)
}

func (c *tallyStore) Props(ctx context.Context, name string) (store.Props, error) {
	defer c.note("props", name, time.Now())
	return c.Store.Props(ctx, name)
}

func (c *tallyStore) List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error) {
	defer c.note("list", prefix, time.Now())
	return c.Store.List(ctx, prefix)
}

func (c *tallyStore) DeleteBatch(ctx context.Context, names []string) error {
	for _, n := range names {
		defer c.note("deletebatch", n, time.Now())
	}
	return c.Store.(interface {
		DeleteBatch(context.Context, []string) error
	}).DeleteBatch(ctx, names)
}

func (c *tallyStore) ListDirs(ctx context.Context, prefix string) ([]string, error) {
	defer c.note("listdirs", prefix, time.Now())
	return c.Store.(interface {
		ListDirs(context.Context, string) ([]string, error)
	}).ListDirs(ctx, prefix)
}

func (c *tallyStore) Name() string { return c.Store.(interface{ Name() string }).Name() }

func (c *tallyStore) ListETags(ctx context.Context, prefix string) ([]store.Listed, error) {
	defer c.note("list", prefix, time.Now())
	return c.Store.(interface {
		ListETags(context.Context, string) ([]store.Listed, error)
	}).ListETags(ctx, prefix)
}
