package builtin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"github.com/mapagg/mapagg/jobs"
	"math/rand/v2"
)

// Pi is the built-in job "pi": a seeded Monte Carlo estimate of π. Shard i draws its points from
// a math/rand/v2 PCG generator seeded with (seed, i), so the result depends only on the
// parameters: not on the order of shards, retries or failovers.
type Pi struct{}

var _ jobs.Job = Pi{}

// PiParams are the parameters of a pi job, e.g. {"samples": 100000000, "shards": 100, "seed": 1}.
type PiParams struct {
	// Samples is the number of random points in all. Required; 1 ≤ samples ≤ 10^15.
	Samples int64 `json:"samples"`
	// Shards is how many shards to split the samples into, as evenly as possible. Required;
	// 1 ≤ shards ≤ min(1,000,000, samples), and no shard may draw more than 10^9 samples.
	Shards int `json:"shards"`
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
	piUsage           = `{"samples": 100000000, "shards": 100, "seed": 1}`
)

// Type returns "pi".
func (Pi) Type() string { return piType }

// Validate checks the parameters; errors match ErrBadParams.
func (Pi) Validate(params json.RawMessage) error {
	_, err := parsePiParams(params)
	return err
}

func parsePiParams(raw json.RawMessage) (PiParams, error) {
	var p PiParams
	if _, err := decodeParams(piType, piUsage, raw, &p, "samples", "shards"); err != nil {
		return p, err
	}
	switch {
	case p.Samples < 1:
		return p, badParam(piType, "samples", `"samples" must be at least 1 (got %d)`, p.Samples)
	case p.Samples > piMaxSamples:
		return p, badParam(piType, "samples", `"samples" must be at most %d (got %d)`, int64(piMaxSamples), p.Samples)
	case p.Shards < 1:
		return p, badParam(piType, "shards", `"shards" must be at least 1 (got %d)`, p.Shards)
	case p.Shards > jobs.MaxShards:
		return p, badParam(piType, "shards", `"shards" must be at most %d (got %d)`, jobs.MaxShards, p.Shards)
	case int64(p.Shards) > p.Samples:
		return p, badParam(piType, "shards", `"shards" must be at most "samples" (got samples=%d, shards=%d)`, p.Samples, p.Shards)
	}
	if per := ceilDiv(uint64(p.Samples), uint64(p.Shards)); per > piMaxShardSamples {
		return p, badParam(piType, "shards",
			`"shards" is too small: each shard would draw %d samples, the limit is %d; use "shards" ≥ %d`,
			per, piMaxShardSamples, ceilDiv(uint64(p.Samples), piMaxShardSamples))
	}
	return p, nil
}

// piShard is a shard of a pi job: draw N points from PCG(Seed, Stream).
type piShard struct {
	Seed   uint64 `json:"seed"`
	Stream uint64 `json:"stream"`
	N      uint64 `json:"n"`
}

// Split gives shard i the stream i and samples/shards points, the first samples%shards shards
// one more.
func (Pi) Split(_ context.Context, _ jobs.Env, params json.RawMessage) ([][]byte, error) {
	p, err := parsePiParams(params)
	if err != nil {
		return nil, err
	}
	n := uint64(p.Shards)
	base, extra := uint64(p.Samples)/n, uint64(p.Samples)%n
	shards := make([][]byte, 0, n)
	for i := uint64(0); i < n; i++ {
		s := piShard{Seed: p.Seed, Stream: i, N: base}
		if i < extra {
			s.N++
		}
		b, err := encodeShardJSON(piType, s)
		if err != nil {
			return nil, err
		}
		shards = append(shards, b)
	}
	return shards, nil
}

func decodePiShard(data []byte) (piShard, error) {
	var s piShard
	if err := decodeShardJSON(piType, data, &s); err != nil {
		return s, err
	}
	if s.N < 1 || s.N > piMaxShardSamples {
		return s, fmt.Errorf("%w: pi: %d samples, want 1 to %d", jobs.ErrBadShard, s.N, piMaxShardSamples)
	}
	return s, nil
}

// Map draws the shard's points: x and y are consecutive values of
// rand.New(rand.NewPCG(seed, stream)).Float64() (computed inline, without the interface call), and
// the point is inside when x²+y² < 1. The partial is (samples, inside).
func (Pi) Map(ctx context.Context, _ jobs.Env, task jobs.Task) ([]byte, error) {
	s, err := decodePiShard(task.Shard)
	if err != nil {
		return nil, err
	}
	inside, err := piSample(ctx, s.Seed, s.Stream, s.N)
	if err != nil {
		return nil, err
	}
	return encodePiPartial(s.N, inside), nil
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

// NewAggregate returns an aggregate summing the shards' points.
func (Pi) NewAggregate(params json.RawMessage) (jobs.Aggregate, error) {
	p, err := parsePiParams(params)
	if err != nil {
		return nil, err
	}
	return &piAggregate{limit: uint64(p.Samples)}, nil
}

type piAggregate struct {
	limit   uint64 // the job's samples: no more can be merged
	samples uint64
	inside  uint64
}

func (a *piAggregate) Merge(partial []byte) error {
	n, in, err := decodePiPartial(partial)
	if err != nil {
		return fmt.Errorf("%w: pi: %v", jobs.ErrBadPartial, err)
	}
	if n > a.limit || a.samples+n > a.limit {
		return fmt.Errorf("%w: pi: %d samples would exceed the job's %d", jobs.ErrBadPartial, n, a.limit)
	}
	a.samples += n
	a.inside += in
	return nil
}

func (a *piAggregate) MarshalBinary() ([]byte, error) {
	return encodePiPartial(a.samples, a.inside), nil
}

func (a *piAggregate) UnmarshalBinary(data []byte) error {
	n, in, err := decodePiPartial(data)
	if err == nil && n > a.limit {
		err = fmt.Errorf("%d samples exceed the job's %d", n, a.limit)
	}
	if err != nil {
		return fmt.Errorf("%w: pi aggregate: %v", jobs.ErrBadCheckpoint, err)
	}
	a.samples, a.inside = n, in
	return nil
}

// Result returns the estimate; it fails if no samples were merged.
func (a *piAggregate) Result() (json.RawMessage, error) {
	if a.samples == 0 {
		return nil, fmt.Errorf("pi: no samples merged")
	}
	return json.Marshal(PiResult{
		Estimate: 4 * float64(a.inside) / float64(a.samples),
		Samples:  a.samples,
		Inside:   a.inside,
	})
}
