package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

const scSchedules = "schedules"

// Schedules is issue 33's schedules at hundreds: Count schedules every second (overlap allow,
// a one-shard sleep job) for ForS seconds, then all deleted at once. Each DELETE's start bounds
// a schedule's due ticks; its return is the acknowledgement.
type Schedules struct {
	Count   int     `json:"schedules"`
	ForS    float64 `json:"for_s"`
	Due     int     `json:"due"`
	Fired   int     `json:"fired"`
	Skipped int64   `json:"skipped"`
	Missed  int64   `json:"missed"`
	// Off counts the schedules whose fired + skipped + missed differ from their due ticks by more
	// than one; Twice the ticks that made more than one job.
	Off   int `json:"schedules_off"`
	Twice int `json:"ticks_twice"`
	// Lateness: a job's spec written after its tick.
	LatenessMedianS float64 `json:"lateness_median_s"`
	LatenessP99S    float64 `json:"lateness_p99_s"`
	JobsAfterDelete int     `json:"jobs_after_delete"`
	BlobsLeft       int     `json:"blobs_left"`
	LeaderChanges   int     `json:"leader_changes"`
	Problem         string  `json:"problem,omitempty"`
}

func (r *runner) schedules(ctx context.Context) error {
	n, over := 300, 60*time.Second
	if r.cfg.Quick {
		n, over = 30, 10*time.Second
	}
	c, err := r.rig.Start(ctx, rig.Spec{Name: "sched", Workers: 2, LeaseDuration: r.cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	st := store.New(c.Blob(), c.JobsContainer())
	sc := &Schedules{Count: n, ForS: over.Seconds()}
	r.mu.Lock()
	r.rep.Schedules = sc
	r.mu.Unlock()

	job := knownjobs.Sleep(1, "1ms")
	names := make([]string, n)
	defs := make([]*protocol.Schedule, n)
	if err := eachOf(n, func(i int) error {
		names[i] = fmt.Sprintf("load-%03d", i)
		if _, err := c.Client.AddSchedule(ctx, names[i], client.ScheduleOptions{Every: time.Second, Type: job.Type, Params: job.Params,
			Overlap: protocol.OverlapAllow}); err != nil {
			return err
		}
		data, _, err := st.Get(ctx, protocol.ScheduleBlob(names[i]))
		if err != nil {
			return err
		}
		defs[i], err = protocol.ParseSchedule(data)
		return err
	}); err != nil {
		return fmt.Errorf("add schedules: %w", err)
	}
	began := time.Now()
	r.log.Logf("schedules: %d every second for %v", n, over)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(over):
	}

	asked, acked := make([]time.Time, n), make([]time.Time, n)
	infos := make([]*client.ScheduleInfo, n)
	if err := eachOf(n, func(i int) error {
		var err error
		asked[i] = time.Now()
		if infos[i], err = c.Client.DeleteSchedule(ctx, names[i]); err != nil {
			return err
		}
		acked[i] = time.Now()
		// The final counts are through the DELETE's mark, a little after asked: the ticks
		// between are counted too.
		if lt := infos[i].LastTick; lt != nil && lt.After(asked[i]) {
			asked[i] = *lt
		}
		return nil
	}); err != nil {
		return fmt.Errorf("delete schedules: %w", err)
	}
	ended := time.Now()
	time.Sleep(3 * time.Second) // a tick fired after an acknowledgement shows by now

	specs, err := scheduledSpecs(ctx, st, began.Add(-time.Hour))
	if err != nil {
		return err
	}
	var late []time.Duration
	for i, name := range names {
		byTick := map[time.Time]int{}
		made := 0
		for _, sp := range specs[name] {
			tk := sp.Tick.UTC()
			byTick[tk]++
			if byTick[tk] == 2 {
				sc.Twice++
			}
			if byTick[tk] == 1 && !tk.After(asked[i]) {
				made++
			}
			late = append(late, sp.SubmittedAt.Sub(tk))
			if sp.SubmittedAt.After(acked[i]) {
				sc.JobsAfterDelete++
			}
		}
		ticks := 0
		for tk := defs[i].Next(defs[i].CreatedAt); !tk.After(asked[i]); tk = defs[i].Next(tk) {
			ticks++
		}
		sc.Due += ticks
		sc.Fired += made
		sc.Skipped += infos[i].Skipped
		sc.Missed += infos[i].Missed
		if d := made + int(infos[i].Skipped+infos[i].Missed) - ticks; d < -1 || d > 1 {
			sc.Off++
		}
	}
	slices.Sort(late)
	if len(late) > 0 {
		sc.LatenessMedianS = rig.Round3(late[len(late)/2].Seconds())
		sc.LatenessP99S = rig.Round3(late[min(len(late)-1, len(late)*99/100)].Seconds())
	}
	left, err := st.List(ctx, "schedules/")
	if err != nil {
		return err
	}
	for _, b := range left {
		if strings.Contains(b.Name, "load-") {
			sc.BlobsLeft++
		}
	}
	sc.LeaderChanges = len(rig.Elections(c, began, ended))
	r.log.Logf("schedules: due %d, fired %d, skipped %d, missed %d (schedules off by more than one: %d); lateness median %s s, p99 %s s; jobs after delete %d; blobs left %d; leader changes %d",
		sc.Due, sc.Fired, sc.Skipped, sc.Missed, sc.Off, rig.Num(sc.LatenessMedianS), rig.Num(sc.LatenessP99S), sc.JobsAfterDelete, sc.BlobsLeft, sc.LeaderChanges)
	return nil
}

// scheduledSpecs reads the specs of the jobs schedules made (ids from since on), by schedule.
func scheduledSpecs(ctx context.Context, st *store.Container, since time.Time) (map[string][]*protocol.Spec, error) {
	blobs, err := st.List(ctx, "")
	if err != nil {
		return nil, err
	}
	from := since.UTC().Format("20060102-150405")
	var names []string
	for _, b := range blobs {
		if id, ok := strings.CutSuffix(b.Name, "/spec.json"); ok && id >= from {
			names = append(names, b.Name)
		}
	}
	var mu sync.Mutex
	out := map[string][]*protocol.Spec{}
	err = eachOf(len(names), func(i int) error {
		data, _, err := st.Get(ctx, names[i])
		if err != nil {
			return err
		}
		spec, err := protocol.ParseSpec(data)
		if err != nil || spec.Schedule == "" || spec.Tick == nil {
			return err
		}
		mu.Lock()
		out[spec.Schedule] = append(out[spec.Schedule], spec)
		mu.Unlock()
		return nil
	})
	return out, err
}

// eachOf runs f(0..n-1), 16 at a time, and returns the first error.
func eachOf(n int, f func(i int) error) error {
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := f(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

// scheduleTargets judges the schedules scenario (issue 33's figures).
func scheduleTargets(cfg *Config, sc *Schedules) []Target {
	if sc == nil {
		return nil
	}
	judged := !cfg.Quick
	what := fmt.Sprintf("%d schedules every 1 s for %.0f s", sc.Count, sc.ForS)
	return []Target{
		{Name: what + ": schedules whose fired + skipped + missed differ from their due ticks by more than 1", Want: "0",
			Value: float64(sc.Off), Met: sc.Off == 0 && sc.Twice == 0, Judged: true,
			Note: fmt.Sprintf("due %d, fired %d, skipped %d, missed %d; ticks with two jobs %d", sc.Due, sc.Fired, sc.Skipped, sc.Missed, sc.Twice)},
		{Name: what + ": median lateness (spec written after its tick)", Want: "≤ 1", Unit: "s",
			Value: sc.LatenessMedianS, Met: sc.LatenessMedianS <= 1, Judged: judged, Note: "p99 " + rig.Num(sc.LatenessP99S) + " s"},
		{Name: what + ": jobs made after their schedule's DELETE was acknowledged", Want: "0",
			Value: float64(sc.JobsAfterDelete), Met: sc.JobsAfterDelete == 0, Judged: true},
		{Name: what + ": blobs of deleted schedules left", Want: "0",
			Value: float64(sc.BlobsLeft), Met: sc.BlobsLeft == 0, Judged: true},
		{Name: what + ": leader changes", Want: "0",
			Value: float64(sc.LeaderChanges), Met: sc.LeaderChanges == 0, Judged: true},
	}
}
