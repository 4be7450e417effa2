package coordinator

import (
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Fair dispatch. Workers pull a type's shards in stream order, so a job's shards wait behind
// every shard of its type already in the stream. The leader therefore keeps each type's
// in-stream shards (dispatched, not merged) to a budget: the type's measured merge rate ×
// (FairHorizon + 2 × its median shard time), and splits it among the type's running jobs by
// protocol.PriorityWeight. A job submitted behind a big one starts within about FairHorizon
// plus a shard time or two, then gets its share of the workers.

// fairInterval is how often the loop re-measures rates and re-splits budgets.
const fairInterval = 100 * time.Millisecond

// fairForget is how long a type's rate outlives its last job, so jobs run one after another
// start at the rate the workers had.
const fairForget = 30 * time.Second

// setWindow sets how many of j's shards may be dispatched and not merged, and wakes its
// dispatcher when that grew.
func (j *job) setWindow(n int) {
	if old := j.window.Swap(int64(n)); int64(n) > old {
		j.wake()
	}
}

// rebalance re-measures each type's merge rate (at most every fairInterval/2) and splits its
// budget among its running jobs that still have shards to dispatch. The loop calls it on adopt,
// retire and every fairInterval.
func (t *term) rebalance(now time.Time) {
	f := &t.fair
	if f.types == nil {
		f.types = map[string]*typeRate{}
	}
	dt := now.Sub(f.last).Seconds()
	measure := dt >= fairInterval.Seconds()/2
	if measure {
		f.last = now
	}
	merged := map[string]int64{}
	weights := map[string]float64{}
	shardTime := map[string]time.Duration{}
	for j := range t.tab.all() {
		typ := j.spec.Type
		shardTime[typ] = max(shardTime[typ], j.bk.median())
		if measure {
			m := j.merged.Load()
			merged[typ] += m - j.fair.counted
			j.fair.counted = m
		} else if _, ok := merged[typ]; !ok {
			merged[typ] = 0
		}
		if j.dispatching() {
			weights[typ] += protocol.PriorityWeight(j.spec.Priority)
		}
	}
	for typ, tr := range f.types {
		if _, ok := merged[typ]; !ok && now.Sub(tr.seen) > fairForget {
			delete(f.types, typ) // no job of the type for a while: its next starts from the floor
		}
	}
	for typ, n := range merged {
		tr := f.types[typ]
		if tr == nil {
			tr = &typeRate{}
			f.types[typ] = tr
		}
		tr.seen = now
		if measure && dt < 10*fairInterval.Seconds() {
			// Rising at once, falling slowly: a budget that limits the rate must not shrink
			// itself, and a short lull must not starve the workers.
			inst := float64(n) / dt
			tr.perSec = max(inst, 0.8*tr.perSec+0.2*inst)
		}
		// The horizon's work queued, plus the shards running (rate × run time, Little's law) twice
		// over. While the budget binds, the workers are not all busy and the next measurement finds
		// a higher rate. So the budget grows to what the workers can take.
		ahead := t.cfg.FairHorizon + 2*shardTime[typ]
		tr.budget = min(max(int(tr.perSec*ahead.Seconds()), t.cfg.FairMinShards), t.cfg.DispatchWindow)
	}
	for j := range t.tab.all() {
		if !j.dispatching() {
			continue
		}
		typ := j.spec.Type
		per := max(j.cp.ShardsPerMsg, 1)
		share := int(float64(f.types[typ].budget) * protocol.PriorityWeight(j.spec.Priority) / weights[typ])
		j.setWindow(min(max(share, 2*per), t.cfg.DispatchWindow))
	}
}

// dispatching: the job runs and has shards not yet dispatched.
func (j *job) dispatching() bool {
	return j.stopDispatch != nil && !j.cp.State.Terminal() && j.cp.Dispatched < j.cp.Total
}
