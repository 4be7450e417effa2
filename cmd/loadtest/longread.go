package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/testworker/userjobs"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

const scLongRead = "long-read"

// LongRead is issue 32's long read: one Map (the test worker's slow-lines) reads one range of
// Bytes bytes of lines, pausing after each so that reading takes at least WantS seconds (60 s
// in the full run, four times the storage client's time per try); it must succeed exactly.
type LongRead struct {
	Bytes     int     `json:"bytes"`
	Lines     int64   `json:"lines"`
	WantS     float64 `json:"want_s"`
	MakespanS float64 `json:"makespan_s"` // submit to finished
	Exact     bool    `json:"exact"`
	Problem   string  `json:"problem,omitempty"`
}

func (r *runner) longRead(ctx context.Context) error {
	cfg := r.cfg
	size, over := 1<<20, 60*time.Second
	if cfg.Quick {
		size, over = 128<<10, 3*time.Second
	}
	c, err := r.rig.Start(ctx, rig.Spec{Name: "lread", TestWorker: true, Workers: 2, LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	container := c.Options().Namespace + "-slow"
	if err := store.New(c.Blob(), container).Ensure(ctx); err != nil {
		return err
	}
	defer func() { _, _ = c.Blob().DeleteContainer(context.WithoutCancel(ctx), container, nil) }()
	data := make([]byte, 0, size)
	for i := 0; ; i++ {
		line := fmt.Sprintf("line %07d of a blob a Map reads slowly\n", i)
		if len(data)+len(line) > size {
			break
		}
		data = append(data, line...)
	}
	if _, err := c.Blob().UploadBuffer(ctx, container, "slow/data.txt", data, nil); err != nil {
		return err
	}
	want := userjobs.TallyOf(data)
	lr := &LongRead{Bytes: len(data), Lines: want.Lines, WantS: over.Seconds()}
	r.mu.Lock()
	r.rep.LongRead = lr
	r.mu.Unlock()
	delay := over/time.Duration(want.Lines) + time.Microsecond
	p, _ := json.Marshal(map[string]any{"container": container, "prefix": "slow/", "shard_bytes": len(data), "line_delay": delay.String()})
	job := knownjobs.Job{Type: "slow-lines", Params: p, Shards: 1, Check: func(res json.RawMessage) error {
		var got userjobs.Tally
		if err := json.Unmarshal(res, &got); err != nil {
			return fmt.Errorf("slow-lines result %s: %v", res, err)
		}
		if got != want {
			return fmt.Errorf("slow-lines read %+v, want %+v", got, want)
		}
		return nil
	}}
	o, err := r.runJob(ctx, c, job, fmt.Sprintf("a Map reading %d KiB for %v", len(data)>>10, over), 1)
	if err != nil {
		return err
	}
	lr.Exact, lr.Problem = o.Exact, o.Problem
	if o.Makespan > 0 {
		lr.MakespanS = rig.Round3(o.Makespan.Seconds())
	}
	if o.Status != nil && o.Status.State != jobs.StateSucceeded {
		lr.Problem = fmt.Sprintf("%s: %s", o.Status.State, o.Status.Error)
	}
	r.log.Logf("long read: a Map read %d KiB of lines in one range over %.1f s: exact %v %s", len(data)>>10, lr.MakespanS, lr.Exact, lr.Problem)
	return nil
}

// longReadTargets judges the long read.
func longReadTargets(lr *LongRead) []Target {
	if lr == nil {
		return nil
	}
	return []Target{{Name: fmt.Sprintf("a Map reading one %d KiB range for at least %.0f s succeeds, exact (1 = yes)", lr.Bytes>>10, lr.WantS),
		Want: "1", Value: b2f(lr.Exact && lr.MakespanS >= lr.WantS), Met: lr.Exact && lr.MakespanS >= lr.WantS, Judged: true,
		Note: fmt.Sprintf("%s s submit to finished; the storage client's time per try is 15 s", rig.Num(lr.MakespanS))}}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
