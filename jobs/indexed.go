package jobs

import (
	"encoding/json"
	"fmt"
)

// Indexed is the optional interface of a Job whose plan is a function of its parameters (a range
// cut into equal parts, a number of samples). The coordinator then stores no plan, only the shard
// count, and makes shard i when it dispatches it. A job of a million shards costs the leader the
// memory of its dispatch window, not of its plan. Split must still return the same shards
// (Plan(params).Shard(i) == Split(params)[i]): tests and tools call it.
type Indexed interface {
	Job
	// Plan decodes the parameters once and returns the job's plan.
	Plan(params json.RawMessage) (Plan, error)
}

// Plan is a job's shards, made on demand. It is used by one goroutine at a time.
type Plan interface {
	// Len is the number of shards, at most MaxShards.
	Len() int
	// Shard returns shard i (0 ≤ i < Len), at most MaxShardBytes. It is deterministic: the same
	// parameters and i give the same bytes, on any leader.
	Shard(i int) ([]byte, error)
}

// WithIndex is the optional pair of methods of a TypedJob whose shards are a function of the
// parameters: Count is how many shards Split makes, Shard(p, i) is Split's shard i. With them,
// Typed returns a Job that is also Indexed.
type WithIndex[P, S any] interface {
	Count(params P) (int, error)
	Shard(params P, i int) (S, error)
}

// typedIndexed is the Job of a TypedJob with WithIndex.
type typedIndexed[P, S, R any] struct {
	*typed[P, S, R]
	index WithIndex[P, S]
}

func (t *typedIndexed[P, S, R]) Plan(raw json.RawMessage) (Plan, error) {
	p, err := t.params(raw)
	if err != nil {
		return nil, err
	}
	n, err := t.index.Count(p)
	if err != nil {
		return nil, err
	}
	if n < 0 || n > MaxShards {
		return nil, fmt.Errorf("%s: %d shards; a job has 0 to %d", t.name, n, MaxShards)
	}
	return &typedPlan[P, S, R]{t: t, p: p, n: n}, nil
}

type typedPlan[P, S, R any] struct {
	t *typedIndexed[P, S, R]
	p P
	n int
}

func (p *typedPlan[P, S, R]) Len() int { return p.n }

func (p *typedPlan[P, S, R]) Shard(i int) ([]byte, error) {
	if i < 0 || i >= p.n {
		return nil, fmt.Errorf("%s: shard %d of %d", p.t.name, i, p.n)
	}
	s, err := p.t.index.Shard(p.p, i)
	if err != nil {
		return nil, fmt.Errorf("%s: shard %d: %w", p.t.name, i, err)
	}
	b, err := p.t.shards.encode(s)
	if err != nil {
		return nil, fmt.Errorf("%s: encode shard %d: %w", p.t.name, i, err)
	}
	return b, nil
}
