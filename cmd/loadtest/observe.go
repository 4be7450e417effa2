package main

import (
	"time"

	"github.com/mapagg/mapagg/internal/harness/rig"
)

// process identifies one run of a worker process: its id and when it was killed. A worker
// restarted under the same id is a different process.
type victim struct {
	worker string
	exited time.Time
}

// redo classifies the results of one job after kills.
type redo struct {
	redelivered    int // shards with a result of attempt > 1
	completedTwice int // shards with more than one result
	redone         int // shards in either set
	completedRerun int // shards first completed by a process that was not killed, then run again
	redispatched   int // shard publishes beyond the first
	backedUp       int // shards the leader backed up (run twice on purpose: not counted above)
	results        int
}

// classify counts shards run more than once. A result published by a killed process before it
// exited may be followed by another (the process died before acking the shard); any other
// shard with a second result, or a second delivery after a completed result, was re-run after
// it had been completed, which must not happen — unless the leader backed the shard up (backup
// tasks run a straggling shard twice on purpose): those are counted apart.
func classify(results []rig.ResultObs, dispatches map[int]int, backups map[int]bool, victims []victim) redo {
	var r redo
	r.results = len(results)
	type key struct{ index, attempt int }
	seen := map[key]bool{}
	byShard := map[int][]rig.ResultObs{}
	for _, o := range results {
		k := key{o.Index, o.Attempt}
		if seen[k] { // the same result published twice (a retried publish): one execution
			continue
		}
		seen[k] = true
		byShard[o.Index] = append(byShard[o.Index], o)
	}
	fromVictim := func(o rig.ResultObs) bool {
		for _, v := range victims {
			if o.Worker == v.worker && !o.T.After(v.exited.Add(50*time.Millisecond)) {
				return true
			}
		}
		return false
	}
	r.backedUp = len(backups)
	for i, obs := range byShard {
		again := len(obs) > 1 && !backups[i]
		if again {
			r.completedTwice++
		}
		redelivered := false
		for _, o := range obs {
			if o.Attempt > 1 {
				redelivered = true
			}
		}
		if redelivered {
			r.redelivered++
		}
		if again || redelivered {
			r.redone++
		}
		if again && !fromVictim(obs[0]) {
			r.completedRerun++
		}
	}
	for _, n := range dispatches {
		r.redispatched += max(0, n-1)
	}
	return r
}
