package report

import (
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Timelines picks the runs worth drawing: the first crash run with one kill and with two, the
// first graceful handover, the first worker crash and the server faults.
func (l *Load) Timelines() []*rig.Timeline {
	var out []*rig.Timeline
	pick := func(runs []FailoverRun, ok func(FailoverRun) bool) {
		for _, r := range runs {
			if r.Timeline != nil && len(r.Kills) > 0 && ok(r) {
				out = append(out, r.Timeline)
				return
			}
		}
	}
	if c := l.Failover.Crash; c != nil {
		pick(c.Runs, func(r FailoverRun) bool { return len(r.Kills) == 1 })
		pick(c.Runs, func(r FailoverRun) bool { return len(r.Kills) > 1 })
	}
	if g := l.Failover.Graceful; g != nil {
		pick(g.Runs, func(FailoverRun) bool { return true })
	}
	if w := l.WorkerCrash; w != nil {
		pick(w.Runs, func(FailoverRun) bool { return true })
	}
	if m := l.Million; m != nil && m.Timeline != nil {
		out = append(out, m.Timeline)
	}
	if o := l.Outage; o != nil && o.Timeline != nil {
		out = append(out, o.Timeline)
	}
	if n := l.NATSCluster; n != nil && n.Timeline != nil {
		out = append(out, n.Timeline)
	}
	return out
}

// NewTimeline is the plot of one run, its kills and elections marked.
func NewTimeline(title string, start time.Time, total int, samples []rig.Sample, completed []time.Time, kills []Kill, elects []rig.Elect, finished float64) *rig.Timeline {
	tl := &rig.Timeline{Title: title, Start: start, Total: total, Samples: samples, Completed: completed, Finished: finished}
	for _, k := range kills {
		tl.Kills = append(tl.Kills, rig.Mark{AtS: k.AtS, Label: k.Signal + " " + k.Worker})
	}
	tl.Elections = rig.ElectionMarks(elects)
	return tl
}
