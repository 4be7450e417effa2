package rig

import (
	"slices"
	"time"
)

// LastPercent is how long the last 1 % of a job's shards took. It runs from the result that left
// 1 % of the shards without one to the last shard's first result (0 if not every shard was seen).
// Bulk throughput hardly weighs on it; a straggler's tail does.
func LastPercent(results []ResultObs, shards int) time.Duration {
	rs := slices.Clone(results)
	slices.SortFunc(rs, func(a, b ResultObs) int { return a.T.Compare(b.T) })
	seen := make(map[int]bool, shards)
	at99 := shards - max(1, shards/100)
	var t99 time.Time
	for _, x := range rs {
		if seen[x.Index] {
			continue
		}
		seen[x.Index] = true
		if len(seen) == at99 {
			t99 = x.T
		}
		if len(seen) == shards {
			return x.T.Sub(t99)
		}
	}
	return 0
}
