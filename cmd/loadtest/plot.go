package main

import (
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// plotted picks the runs worth drawing: the first crash run with one kill and with two, the
// first graceful handover and the first worker crash.
func plotted(rep *Report) []*rig.Timeline {
	var out []*rig.Timeline
	pick := func(runs []FailoverRun, ok func(FailoverRun) bool) {
		for _, r := range runs {
			if r.timeline != nil && len(r.Kills) > 0 && ok(r) {
				out = append(out, r.timeline)
				return
			}
		}
	}
	if c := rep.Failover.Crash; c != nil {
		pick(c.Runs, func(r FailoverRun) bool { return len(r.Kills) == 1 })
		pick(c.Runs, func(r FailoverRun) bool { return len(r.Kills) > 1 })
	}
	if g := rep.Failover.Graceful; g != nil {
		pick(g.Runs, func(FailoverRun) bool { return true })
	}
	if w := rep.WorkerCrash; w != nil {
		pick(w.Runs, func(FailoverRun) bool { return true })
	}
	if m := rep.Million; m != nil && m.timeline != nil {
		out = append(out, m.timeline)
	}
	if o := rep.Outage; o != nil && o.timeline != nil {
		out = append(out, o.timeline)
	}
	if n := rep.NATSCluster; n != nil && n.timeline != nil {
		out = append(out, n.timeline)
	}
	return out
}

// newTimeline is the plot of one run, its kills and elections marked.
func newTimeline(title string, start time.Time, total int, samples []rig.Sample, completed []time.Time, kills []Kill, elects []rig.Elect, finished float64) *rig.Timeline {
	tl := &rig.Timeline{Title: title, Start: start, Total: total, Samples: samples, Completed: completed, Finished: finished}
	for _, k := range kills {
		tl.Kills = append(tl.Kills, rig.Mark{AtS: k.AtS, Label: k.Signal + " " + k.Worker})
	}
	tl.Elections = rig.ElectionMarks(elects)
	return tl
}
