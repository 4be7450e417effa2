package coordinator

import (
	"strconv"
	"testing"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// A job's way through the table: handed over by intake, adopted, finished, cleaned. The count
// intake reads never misses a job on the way.
func TestJobTable_Transitions(t *testing.T) {
	for _, c := range []struct {
		name      string
		fresh     bool // handed over by intake (counted in handing first)
		twice     bool // claimed by a rescan meanwhile: added again
		wantCount int
	}{
		{"claimed", false, false, 1},
		{"planned by intake", true, false, 1},
		{"planned, and claimed meanwhile", true, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := newJobTable()
			j := &job{id: "j1", fresh: c.fresh}
			if c.fresh {
				tb.handOver()
				if tb.count() != 1 {
					t.Fatalf("count while handed over %d, want 1", tb.count())
				}
			}
			if c.twice {
				if !tb.add(&job{id: "j1"}) {
					t.Fatal("first add refused")
				}
				if tb.add(j) {
					t.Fatal("a second add of an active id was taken")
				}
			} else if !tb.add(j) {
				t.Fatal("add refused")
			}
			if tb.count() != c.wantCount || tb.len() != 1 {
				t.Fatalf("count %d, len %d after add; want %d, 1", tb.count(), tb.len(), c.wantCount)
			}
			got := tb.get("j1")
			got.cp.State = jobs.StateSucceeded
			tb.finish(got)
			if tb.get("j1") != nil || tb.count() != 0 || !tb.ended("j1") {
				t.Fatalf("after finish: active %v, count %d, ended %v", tb.get("j1") != nil, tb.count(), tb.ended("j1"))
			}
			if !tb.isCleaning("j1") {
				t.Fatal("a finished job is not marked being cleaned")
			}
			tb.Cleaned([]string{"j1"})
			if tb.isCleaning("j1") {
				t.Fatal("still being cleaned after its marker is gone")
			}
		})
	}
}

// A job intake planned and then waited to hand over, while a duplicate message of it (a retried
// submit) had it claimed from its first checkpoint and run to its end: the stale hand-over is
// refused, and uncounted.
func TestJobTable_HandedAfterItsEndRefused(t *testing.T) {
	tb := newJobTable()
	claimed := &job{id: "j1"}
	if !tb.add(claimed) {
		t.Fatal("claim refused")
	}
	claimed.cp.State = jobs.StateSucceeded
	tb.finish(claimed)
	tb.handOver()
	if tb.add(&job{id: "j1", fresh: true}) {
		t.Fatal("a hand-over of a job that ended in this term was adopted")
	}
	if tb.count() != 0 || tb.get("j1") != nil {
		t.Fatalf("count %d, active %v after the refused hand-over; want 0, none", tb.count(), tb.get("j1"))
	}
	if !tb.add(&job{id: "j2", fresh: true}) {
		t.Fatal("a hand-over of another job refused")
	}
	light := &job{id: "j1", fresh: true}
	light.light.Store(true)
	tb.handOver()
	if !tb.add(light) {
		t.Fatal("a light job's hand-over refused: its first write, not the table, finds the stored end")
	}
}

func TestJobTable_HandBackUncounts(t *testing.T) {
	tb := newJobTable()
	tb.handOver()
	tb.handBack()
	if tb.count() != 0 {
		t.Fatalf("count %d after a hand-over given up", tb.count())
	}
}

// A marked job without a checkpoint is queued again once a term, and only after it has been seen
// so for the wait (an intake between marker and checkpoint must not be cut short).
func TestJobTable_RequeueOnceAfterTheWait(t *testing.T) {
	tb := newJobTable()
	t0 := time.Now()
	wait := 10 * time.Second
	for _, step := range []struct {
		at     time.Duration
		queued bool // requeuedNow before this step
		want   bool
	}{
		{0, false, false},               // first seen
		{5 * time.Second, false, false}, // too soon
		{10 * time.Second, false, true}, // due
		{11 * time.Second, false, true}, // still due: the queueing failed
		{12 * time.Second, true, false}, // queued: never again this term
		{time.Hour, false, false},
	} {
		if step.queued {
			tb.requeuedNow("j")
		}
		if got := tb.requeueDue("j", t0.Add(step.at), wait); got != step.want {
			t.Errorf("at %v: due %v, want %v", step.at, got, step.want)
		}
	}
}

func TestJobTable_WaitingAndFinishedBound(t *testing.T) {
	tb := newJobTable()
	tb.setWaiting("w", true)
	if !tb.isWaiting("w") {
		t.Fatal("not waiting")
	}
	tb.setWaiting("w", false)
	if tb.isWaiting("w") {
		t.Fatal("still waiting")
	}
	for i := range finishedMax {
		tb.sawEnd(strconv.Itoa(i), jobs.StateSucceeded)
	}
	tb.sawEnd("last", jobs.StateFailed)
	if len(tb.finished) != 1 || !tb.ended("last") {
		t.Fatalf("finished holds %d, want 1 after the bound", len(tb.finished))
	}
}
