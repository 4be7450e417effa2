package coordinator

import (
	"sync"
	"time"
)

// Several short shards a message (docs/design.md, "Short shards travel together"). A job of fewer
// than 4096 shards gets one shard a message (shardsPerMsg): its shards may be long, and a
// message's shards run in turn on one slot. But a message costs the cluster about as much CPU as
// a short shard's compute (a publish, a store, a delivery, an ack, a result), so a job of 200
// shards of 0.1 ms spent most of its time on messages. The coordinator remembers, by job type,
// the median run time of the shards of its last job that succeeded; a job of a type whose
// shards ran at most paceShort gets several a message, as many as keep a message's run within
// paceBudget and leave every slot paceWaves messages. The first job of a type, a type whose
// shards are long, and a cluster whose slots are unknown keep one a message.

const (
	// paceShort is the longest median shard run time of a type whose shards travel together.
	paceShort = time.Millisecond
	// paceBudget bounds a message's run: its shards run in turn on one slot.
	paceBudget = 2 * time.Millisecond
	// paceWaves is the fewest messages a job leaves each slot, so that shards still spread.
	paceWaves = 8
	// paceSamples is the fewest shards merged in a job for its median to count.
	paceSamples = 16
	// paceTypes bounds the types remembered (a type forgotten travels one a message again).
	paceTypes = 1024
)

// shardPace is the coordinator's memory of how long the shards of each job type run. It outlives
// a term: the next leader of this process plans with it too.
type shardPace struct {
	mu sync.Mutex
	by map[string]time.Duration
}

// observe records the median shard run time of a job of type typ that succeeded (0: unknown,
// forgets the type).
func (p *shardPace) observe(typ string, median time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if median <= 0 {
		delete(p.by, typ)
		return
	}
	if p.by == nil {
		p.by = map[string]time.Duration{}
	}
	if _, ok := p.by[typ]; !ok && len(p.by) >= paceTypes {
		return
	}
	p.by[typ] = median
}

// perMsg is how many shards a message carries for a job of total shards of type typ on slots
// slots (0: unknown), under 4096 shards; shardsPerMsg decides above.
func (p *shardPace) perMsg(typ string, total, slots int) int {
	if total >= 4096 {
		return shardsPerMsg(total)
	}
	p.mu.Lock()
	median := p.by[typ]
	p.mu.Unlock()
	if median <= 0 || median > paceShort || slots <= 0 {
		return 1
	}
	n := min(total/(paceWaves*slots), int(paceBudget/median), 16)
	return max(n, 1)
}
