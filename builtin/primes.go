package builtin

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/mapagg/mapagg/jobs"
)

// primes is the built-in job "primes": count the primes p with from ≤ p < to, by a segmented
// sieve of Eratosthenes over each shard's range. Exact and CPU-bound. It is written with the typed
// API (jobs.TypedJob); builtin.Jobs registers jobs.Typed("primes", primes{}).
type primes struct{}

var (
	_ jobs.TypedJob[PrimesParams, primesShard, primesCount] = primes{}
	_ jobs.WithCheck[PrimesParams, primesCount]             = primes{}
	_ jobs.WithResult[PrimesParams, primesCount]            = primes{}
)

// PrimesParams are the parameters of a primes job, e.g. {"from": 0, "to": 10000000, "shards": 100}.
type PrimesParams struct {
	// From is the start of the range, inclusive. Optional, default 0.
	From uint64 `json:"from"`
	// To is the end of the range, exclusive. Required; from < to ≤ 2^50.
	To uint64 `json:"to" jobs:"required"`
	// Shards is how many shards to split the range into. Required; 1 ≤ shards ≤ min(1,000,000,
	// to-from), and no shard may cover more than 2^32 numbers.
	Shards int `json:"shards" jobs:"required"`
}

// PrimesResult is the result of a primes job.
type PrimesResult struct {
	Count uint64 `json:"count"` // the number of primes in [from, to)
}

const (
	primesType = "primes"
	// primesMaxTo bounds "to": the base primes of a shard (up to √to ≈ 3.4·10^7) stay small.
	primesMaxTo = 1 << 50
	// primesMaxShardSpan bounds the numbers one shard sieves (seconds of work).
	primesMaxShardSpan = 1 << 32
)

// Usage is an example of good parameters.
func (PrimesParams) Usage() string { return `{"from": 0, "to": 10000000, "shards": 100}` }

// Validate checks the decoded parameters; errors are *jobs.ParamError.
func (p PrimesParams) Validate() error {
	switch {
	case p.To > primesMaxTo:
		return jobs.BadParam("to", `"to" must be at most %d (2^50) (got %d)`, uint64(primesMaxTo), p.To)
	case p.To <= p.From:
		return jobs.BadParam("to", `"to" must be greater than "from" (got from=%d, to=%d)`, p.From, p.To)
	case p.Shards < 1:
		return jobs.BadParam("shards", `"shards" must be at least 1 (got %d)`, p.Shards)
	case p.Shards > jobs.MaxShards:
		return jobs.BadParam("shards", `"shards" must be at most %d (got %d)`, jobs.MaxShards, p.Shards)
	case uint64(p.Shards) > p.To-p.From:
		return jobs.BadParam("shards",
			`"shards" must be at most the size of the range, to-from=%d (got %d)`, p.To-p.From, p.Shards)
	}
	span := p.To - p.From
	if per := ceilDiv(span, uint64(p.Shards)); per > primesMaxShardSpan {
		return jobs.BadParam("shards",
			`"shards" is too small: each shard would cover %d numbers, the limit is %d; use "shards" ≥ %d`,
			per, uint64(primesMaxShardSpan), ceilDiv(span, primesMaxShardSpan))
	}
	return nil
}

func ceilDiv(a, b uint64) uint64 { return a/b + min(a%b, 1) }

// primesShard is a shard of a primes job: count the primes in [Lo, Hi).
type primesShard struct {
	Lo uint64 `json:"lo"`
	Hi uint64 `json:"hi"`
}

// Validate refuses a range no split makes.
func (s primesShard) Validate() error {
	if s.Lo >= s.Hi || s.Hi > primesMaxTo || s.Hi-s.Lo > primesMaxShardSpan {
		return fmt.Errorf("range [%d, %d) is empty or out of bounds", s.Lo, s.Hi)
	}
	return nil
}

// Split divides [from, to) into shards ranges whose sizes differ by at most one: shard i is
// Shard(p, i).
func (j primes) Split(_ context.Context, _ jobs.Env, p PrimesParams) ([]primesShard, error) {
	shards := make([]primesShard, 0, p.Shards)
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
func (primes) Count(p PrimesParams) (int, error) { return p.Shards, nil }

// Shard returns range i of Split: the first span%shards ranges are one longer.
func (primes) Shard(p PrimesParams, i int) (primesShard, error) {
	n, k := uint64(p.Shards), uint64(i)
	if i < 0 || k >= n {
		return primesShard{}, fmt.Errorf("shard %d of %d", i, n)
	}
	span := p.To - p.From
	base, extra := span/n, span%n
	lo := p.From + k*base + min(k, extra)
	hi := lo + base
	if k < extra {
		hi++
	}
	return primesShard{Lo: lo, Hi: hi}, nil
}

// Map counts the primes in the shard's range. The partial is the count.
func (primes) Map(ctx context.Context, _ jobs.Env, s primesShard) (primesCount, error) {
	n, err := countPrimes(ctx, s.Lo, s.Hi)
	return primesCount(n), err
}

// Merge adds two counts.
func (primes) Merge(a, b primesCount) primesCount { return a + b }

// Check refuses a count that would exceed the numbers in the range.
func (primes) Check(p PrimesParams, acc, n primesCount) error {
	limit := primesCount(p.To - p.From)
	if n > limit || acc+n > limit {
		return fmt.Errorf("count %d would exceed the %d numbers in the range", n, limit)
	}
	return nil
}

// Result is the count as a PrimesResult.
func (primes) Result(_ PrimesParams, n primesCount) (any, error) {
	return PrimesResult{Count: uint64(n)}, nil
}

// primesCount is the partial of a primes job, in the built-ins' binary form (codec.go): tag 'P',
// version, the count as a uvarint.
type primesCount uint64

func (n primesCount) MarshalBinary() ([]byte, error) { return encodePrimesPartial(uint64(n)), nil }

func (n *primesCount) UnmarshalBinary(data []byte) error {
	v, err := decodePrimesPartial(data)
	*n = primesCount(v)
	return err
}

func encodePrimesPartial(count uint64) []byte {
	return binary.AppendUvarint(appendPartialHeader(nil, tagPrimes), count)
}

func decodePrimesPartial(data []byte) (uint64, error) {
	r := newPartialReader(data, tagPrimes)
	n := r.uvarint()
	return n, r.finish()
}

// countPrimes counts the primes in [lo, hi) with a segmented sieve over the odd numbers. It
// checks ctx between segments.
func countPrimes(ctx context.Context, lo, hi uint64) (uint64, error) {
	var count uint64
	if lo <= 2 && 2 < hi {
		count = 1
	}
	start := max(lo, 3) | 1 // the first odd number ≥ max(lo, 3)
	if start >= hi {
		return count, nil
	}
	base := oddPrimesUpTo(isqrt(hi - 1))

	// One byte per odd number; a segment fits in L2 cache. Bigger ranges get bigger segments so
	// that the per-segment pass over the base primes stays small next to the sieving.
	segOdds := uint64(1 << 15)
	if len(base) > 1<<12 {
		segOdds = 1 << 20
	}
	seg := make([]byte, segOdds)
	// next[k] is the next odd multiple of base[k] still to cross out, ≥ base[k]².
	next := make([]uint64, len(base))
	for k, p32 := range base {
		p := uint64(p32)
		m := p * p
		if m < start {
			m = ceilDiv(start, p) * p
			if m&1 == 0 {
				m += p
			}
		}
		next[k] = m
	}
	for segLo := start; segLo < hi; segLo += 2 * segOdds {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		segHi := min(segLo+2*segOdds, hi) // odd numbers segLo, segLo+2, … below segHi
		n := (segHi - segLo + 1) / 2
		s := seg[:n]
		clear(s)
		for k, p32 := range base {
			p := uint64(p32)
			m := next[k]
			if m >= segHi {
				if p*p >= segHi {
					break // and so for every larger prime
				}
				continue
			}
			j := (m - segLo) / 2
			for ; j < n; j += p {
				s[j] = 1
			}
			next[k] = segLo + 2*j
		}
		count += uint64(bytes.Count(s, []byte{0}))
	}
	return count, nil
}

// isqrt returns ⌊√n⌋.
func isqrt(n uint64) uint64 {
	r := uint64(math.Sqrt(float64(n)))
	for r*r > n {
		r--
	}
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// primesBaseCache holds the odd primes up to some limit, shared by every shard of a process so
// that many small shards high in the range do not each re-sieve their base primes.
var primesBaseCache struct {
	mu     sync.Mutex
	limit  uint64
	primes []uint32
}

// oddPrimesUpTo returns the odd primes ≤ limit (limit ≤ 2^25), ascending. The slice is shared:
// callers must not modify it.
func oddPrimesUpTo(limit uint64) []uint32 {
	c := &primesBaseCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if limit > c.limit {
		c.limit = max(limit, 1<<16)
		c.primes = sieveOddPrimes(c.limit)
	}
	// The cache may hold primes past limit; return only those ≤ limit.
	lo, hi := 0, len(c.primes)
	for lo < hi {
		mid := (lo + hi) / 2
		if uint64(c.primes[mid]) <= limit {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return c.primes[:lo:lo]
}

// sieveOddPrimes is a plain sieve of Eratosthenes over the odd numbers up to limit.
func sieveOddPrimes(limit uint64) []uint32 {
	if limit < 3 {
		return nil
	}
	// composite[i] is for the odd number 2i+1.
	composite := make([]bool, limit/2+1)
	var primes []uint32
	for i := uint64(1); 2*i+1 <= limit; i++ {
		if composite[i] {
			continue
		}
		p := 2*i + 1
		primes = append(primes, uint32(p))
		for m := p * p; m <= limit; m += 2 * p {
			composite[m/2] = true
		}
	}
	return primes
}
