package rig

import "time"

// Redo classifies the results of one job after kills.
type Redo struct {
	Redelivered    int // shards with a result of attempt > 1
	CompletedTwice int // shards with more than one result
	Redone         int // shards in either set
	CompletedRerun int // shards first completed by a process that was not killed, then run again
	Redispatched   int // shard publishes beyond the first
	BackedUp       int // shards the leader backed up (run twice on purpose: not counted above)
	Results        int
}

// Classify counts shards run more than once. A result a killed process published before it
// exited may be followed by another: it died before acking the shard. Any other second result,
// or second delivery after a completed result, re-ran a completed shard, which must not happen.
// Shards the leader backed up run twice on purpose; they are counted apart.
func Classify(results []ResultObs, dispatches map[int]int, backups map[int]bool, victims []Kill) Redo {
	var r Redo
	r.Results = len(results)
	type key struct{ index, attempt int }
	seen := map[key]bool{}
	byShard := map[int][]ResultObs{}
	for _, o := range results {
		k := key{o.Index, o.Attempt}
		if seen[k] { // the same result published twice (a retried publish): one execution
			continue
		}
		seen[k] = true
		byShard[o.Index] = append(byShard[o.Index], o)
	}
	fromVictim := func(o ResultObs) bool {
		for _, v := range victims {
			if o.Worker == v.Worker && !o.T.After(v.Exited.Add(50*time.Millisecond)) {
				return true
			}
		}
		return false
	}
	r.BackedUp = len(backups)
	for i, obs := range byShard {
		again := len(obs) > 1 && !backups[i]
		if again {
			r.CompletedTwice++
		}
		redelivered := false
		for _, o := range obs {
			if o.Attempt > 1 {
				redelivered = true
			}
		}
		if redelivered {
			r.Redelivered++
		}
		if again || redelivered {
			r.Redone++
		}
		if again && !fromVictim(obs[0]) {
			r.CompletedRerun++
		}
	}
	for _, n := range dispatches {
		r.Redispatched += max(0, n-1)
	}
	return r
}
