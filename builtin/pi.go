package builtin

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"

	"github.com/mapagg/mapagg/jobs"
)

// pi is the built-in job "pi": a seeded Monte Carlo estimate of π. Shard i draws its points from
// a math/rand/v2 PCG generator seeded with (seed, i), so the result depends only on the
// parameters: not on the order of shards, retries or failovers. It is written with the typed API
// (jobs.TypedJob); builtin.Jobs registers jobs.Typed("pi", pi{}).
type pi struct{}

var (
	_ jobs.TypedJob[PiParams, piShard, piPartial] = pi{}
	_ jobs.WithCheck[PiParams, piPartial]         = pi{}
	_ jobs.WithResult[PiParams, piPartial]        = pi{}
)

// PiParams are the parameters of a pi job, e.g. {"samples": 100000000, "shards": 100, "seed": 1}.
type PiParams struct {
	// Samples is the number of random points in all. Required; 1 ≤ samples ≤ 10^15.
	Samples int64 `json:"samples" jobs:"required"`
	// Shards is how many shards to split the samples into, as evenly as possible. Required;
	// 1 ≤ shards ≤ min(1,000,000, samples), and no shard may draw more than 10^9 samples.
	Shards int `json:"shards" jobs:"required"`
	// Seed selects the random streams. Optional, default 0.
	Seed uint64 `json:"seed"`
}

// PiResult is the result of a pi job.
type PiResult struct {
	Estimate float64 `json:"estimate"` // 4 · inside / samples
	Samples  uint64  `json:"samples"`  // points drawn
	Inside   uint64  `json:"inside"`   // points inside the quarter circle
}

const (
	piType            = "pi"
	piMaxSamples      = 1_000_000_000_000_000
	piMaxShardSamples = 1_000_000_000
)

// Usage is an example of good parameters.
func (PiParams) Usage() string { return `{"samples": 100000000, "shards": 100, "seed": 1}` }

// Validate checks the decoded parameters; errors are *jobs.ParamError.
func (p PiParams) Validate() error {
	switch {
	case p.Samples < 1:
		return jobs.BadParam("samples", `"samples" must be at least 1 (got %d)`, p.Samples)
	case p.Samples > piMaxSamples:
		return jobs.BadParam("samples", `"samples" must be at most %d (got %d)`, int64(piMaxSamples), p.Samples)
	case p.Shards < 1:
		return jobs.BadParam("shards", `"shards" must be at least 1 (got %d)`, p.Shards)
	case p.Shards > jobs.MaxShards:
		return jobs.BadParam("shards", `"shards" must be at most %d (got %d)`, jobs.MaxShards, p.Shards)
	case int64(p.Shards) > p.Samples:
		return jobs.BadParam("shards", `"shards" must be at most "samples" (got samples=%d, shards=%d)`, p.Samples, p.Shards)
	}
	if per := ceilDiv(uint64(p.Samples), uint64(p.Shards)); per > piMaxShardSamples {
		return jobs.BadParam("shards",
			`"shards" is too small: each shard would draw %d samples, the limit is %d; use "shards" ≥ %d`,
			per, piMaxShardSamples, ceilDiv(uint64(p.Samples), piMaxShardSamples))
	}
	return nil
}

// piShard is a shard of a pi job: draw N points from PCG(Seed, Stream).
type piShard struct {
	Seed   uint64 `json:"seed"`
	Stream uint64 `json:"stream"`
	N      uint64 `json:"n"`
}

// Validate refuses a sample count no split makes.
func (s piShard) Validate() error {
	if s.N < 1 || s.N > piMaxShardSamples {
		return fmt.Errorf("%d samples, want 1 to %d", s.N, piMaxShardSamples)
	}
	return nil
}

// Split gives shard i the stream i and samples/shards points, the first samples%shards shards
// one more: shard i is Shard(p, i).
func (j pi) Split(_ context.Context, _ jobs.Env, p PiParams) ([]piShard, error) {
	shards := make([]piShard, 0, p.Shards)
	for i := range p.Shards {
		s, err := j.Shard(p, i)
		if err != nil {
			return nil, err
		}
		shards = append(shards, s)
	}
	return shards, nil
}

// Count is the number of shards: the leader makes each with Shard as it dispatches it, and stores
// no plan.
func (pi) Count(p PiParams) (int, error) { return int(p.Shards), nil }

// Shard returns shard i of Split.
func (pi) Shard(p PiParams, i int) (piShard, error) {
	n, k := uint64(p.Shards), uint64(i)
	if i < 0 || k >= n {
		return piShard{}, fmt.Errorf("shard %d of %d", i, n)
	}
	s := piShard{Seed: p.Seed, Stream: k, N: uint64(p.Samples) / n}
	if k < uint64(p.Samples)%n {
		s.N++
	}
	return s, nil
}

// Map draws the shard's points: x and y are consecutive values of
// rand.New(rand.NewPCG(seed, stream)).Float64() (computed inline, without the interface call), and
// the point is inside when x²+y² < 1. The partial is (samples, inside).
func (pi) Map(ctx context.Context, _ jobs.Env, s piShard) (piPartial, error) {
	inside, err := piSample(ctx, s.Seed, s.Stream, s.N)
	if err != nil {
		return piPartial{}, err
	}
	return piPartial{Samples: s.N, Inside: inside}, nil
}

// Merge adds the points.
func (pi) Merge(a, b piPartial) piPartial {
	return piPartial{Samples: a.Samples + b.Samples, Inside: a.Inside + b.Inside}
}

// Check refuses samples past the job's.
func (pi) Check(p PiParams, acc, b piPartial) error {
	limit := uint64(p.Samples)
	if b.Samples > limit || acc.Samples+b.Samples > limit {
		return fmt.Errorf("%d samples would exceed the job's %d", b.Samples, limit)
	}
	return nil
}

// Result returns the estimate; it fails if no samples were merged.
func (pi) Result(_ PiParams, acc piPartial) (any, error) {
	if acc.Samples == 0 {
		return nil, fmt.Errorf("pi: no samples merged")
	}
	return PiResult{
		Estimate: 4 * float64(acc.Inside) / float64(acc.Samples),
		Samples:  acc.Samples,
		Inside:   acc.Inside,
	}, nil
}

// piPartial is the partial of a pi job, in the built-ins' binary form (codec.go): tag 'M',
// version, samples and inside as uvarints.
type piPartial struct {
	Samples, Inside uint64
}

func (p piPartial) MarshalBinary() ([]byte, error) { return encodePiPartial(p.Samples, p.Inside), nil }

func (p *piPartial) UnmarshalBinary(data []byte) error {
	var err error
	p.Samples, p.Inside, err = decodePiPartial(data)
	return err
}

func piSample(ctx context.Context, seed, stream, n uint64) (uint64, error) {
	src := rand.NewPCG(seed, stream)
	var inside uint64
	for i := uint64(0); i < n; i++ {
		if i&(1<<20-1) == 0 {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
		}
		x := float64(src.Uint64()<<11>>11) / (1 << 53) // as rand.Rand.Float64
		y := float64(src.Uint64()<<11>>11) / (1 << 53)
		if x*x+y*y < 1 {
			inside++
		}
	}
	return inside, nil
}

func encodePiPartial(samples, inside uint64) []byte {
	b := appendPartialHeader(nil, tagPi)
	b = binary.AppendUvarint(b, samples)
	return binary.AppendUvarint(b, inside)
}

func decodePiPartial(data []byte) (samples, inside uint64, err error) {
	r := newPartialReader(data, tagPi)
	samples, inside = r.uvarint(), r.uvarint()
	if err := r.finish(); err != nil {
		return 0, 0, err
	}
	if inside > samples {
		return 0, 0, fmt.Errorf("%d points inside of %d", inside, samples)
	}
	return samples, inside, nil
}
