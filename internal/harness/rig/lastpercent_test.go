package rig

import (
	"testing"
	"time"
)

// LastPercent measures from the result that left 1 % of the shards without one to the last
// shard's first result; duplicates and unsorted arrival do not count.
func TestLastPercent(t *testing.T) {
	t0 := time.Now()
	var rs []ResultObs
	for i := 0; i < 199; i++ { // 200 shards: 1 % is 2
		rs = append(rs, ResultObs{T: t0.Add(time.Duration(i) * time.Millisecond), Index: i})
	}
	rs = append(rs, ResultObs{T: t0.Add(500 * time.Millisecond), Index: 5}) // a duplicate, late
	if got := LastPercent(rs, 200); got != 0 {
		t.Fatalf("shard 199 never seen: %v, want 0", got)
	}
	rs = append([]ResultObs{{T: t0.Add(900 * time.Millisecond), Index: 199}}, rs...)
	// The 198th distinct result came at 197ms, the last at 900ms.
	if got := LastPercent(rs, 200); got != 703*time.Millisecond {
		t.Fatalf("LastPercent %v, want 703ms", got)
	}
}
