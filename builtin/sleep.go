package builtin

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/precise"
	"github.com/mapagg/mapagg/jobs"
)

// sleep is the built-in job "sleep": synthetic shards for load and failover tests. Each shard
// sleeps a fixed time; a seeded subset fails on its first attempt, and chosen shards can fail or
// panic on every attempt. The result lets a test check that every shard was counted exactly once:
// shards == n and index_sum == n·(n−1)/2.
type sleep struct{}

var _ jobs.Job = sleep{}

// SleepParams are the parameters of a sleep job, e.g.
// {"shards": 1000, "duration": "50ms", "fail_rate": 0.1, "seed": 7}.
type SleepParams struct {
	// Shards is the number of shards. Required; 1 ≤ shards ≤ 1,000,000.
	Shards int `json:"shards" jobs:"required"`
	// Duration is how long each shard sleeps, as a Go duration ("50ms", "2s"). Optional, default
	// "0s"; at most "1h".
	Duration string `json:"duration,omitempty"`
	// FailRate is the fraction of shards that fail on their first attempt (and succeed when
	// retried), chosen by a hash of (seed, index). Optional, default 0; 0 ≤ fail_rate ≤ 1.
	FailRate float64 `json:"fail_rate,omitempty"`
	// Seed selects which shards fail first. Optional, default 0.
	Seed uint64 `json:"seed,omitempty"`
	// FailAlways lists shard indices that fail on every attempt: poison shards. At most 1,000.
	FailAlways []int `json:"fail_always,omitempty"`
	// PanicAlways lists shard indices whose map step panics on every attempt. At most 1,000.
	PanicAlways []int `json:"panic_always,omitempty"`
}

// SleepResult is the result of a sleep job.
type SleepResult struct {
	Shards   uint64 `json:"shards"`    // shards merged
	IndexSum uint64 `json:"index_sum"` // the sum of their indices
}

const (
	sleepType        = "sleep"
	sleepMaxDuration = time.Hour
	sleepMaxList     = 1000
)

// Usage is an example of good parameters.
func (SleepParams) Usage() string {
	return `{"shards": 100, "duration": "50ms", "fail_rate": 0.1, "seed": 1}`
}

// The modes of a sleep shard.
const (
	sleepOK          = ""
	sleepFailFirst   = "fail_first"
	sleepFailAlways  = "fail_always"
	sleepPanicAlways = "panic_always"
)

// Type returns "sleep".
func (sleep) Type() string { return sleepType }

// Validate checks the parameters; errors match ErrBadParams.
func (sleep) Validate(params json.RawMessage) error {
	_, _, err := parseSleepParams(params)
	return err
}

func parseSleepParams(raw json.RawMessage) (SleepParams, time.Duration, error) {
	var p SleepParams
	if _, err := jobs.DecodeParams(sleepType, raw, &p); err != nil {
		return p, 0, err
	}
	switch {
	case p.Shards < 1:
		return p, 0, badParam(sleepType, "shards", `"shards" must be at least 1 (got %d)`, p.Shards)
	case p.Shards > jobs.MaxShards:
		return p, 0, badParam(sleepType, "shards", `"shards" must be at most %d (got %d)`, jobs.MaxShards, p.Shards)
	case !(p.FailRate >= 0 && p.FailRate <= 1):
		return p, 0, badParam(sleepType, "fail_rate", `"fail_rate" must be between 0 and 1 (got %v)`, p.FailRate)
	}
	var d time.Duration
	if p.Duration != "" {
		var err error
		d, err = time.ParseDuration(p.Duration)
		if err != nil {
			return p, 0, badParam(sleepType, "duration", `"duration" must be a Go duration such as "50ms" or "2s" (got %q)`, p.Duration)
		}
		if d < 0 || d > sleepMaxDuration {
			return p, 0, badParam(sleepType, "duration", `"duration" must be between 0s and %v (got %q)`, sleepMaxDuration, p.Duration)
		}
	}
	seen := make(map[int]string)
	for _, l := range []struct {
		field string
		list  []int
	}{{"fail_always", p.FailAlways}, {"panic_always", p.PanicAlways}} {
		if len(l.list) > sleepMaxList {
			return p, 0, badParam(sleepType, l.field, "%q may list at most %d shards (got %d)", l.field, sleepMaxList, len(l.list))
		}
		for _, i := range l.list {
			if i < 0 || i >= p.Shards {
				return p, 0, badParam(sleepType, l.field, "%q lists shard %d; shard indices run from 0 to shards-1 = %d", l.field, i, p.Shards-1)
			}
			if other, ok := seen[i]; ok && other != l.field {
				return p, 0, badParam(sleepType, l.field, `shard %d is in both "fail_always" and "panic_always"`, i)
			}
			seen[i] = l.field
		}
	}
	return p, d, nil
}

// sleepFailsFirst reports whether shard index of a job seeded with seed fails its first attempt
// at this fail rate: a hash of (seed, index), as a number in [0, 1), is below rate.
func sleepFailsFirst(seed uint64, index int, rate float64) bool {
	h := mix64(seed ^ mix64(uint64(index)+0x9e3779b97f4a7c15))
	return float64(h>>11)*0x1p-53 < rate
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// sleepShard is a shard of a sleep job.
type sleepShard struct {
	Index int    `json:"i"`
	Nanos int64  `json:"ns"`
	Mode  string `json:"mode,omitempty"`
}

// Split returns one shard per index, each carrying its duration and failure mode: shard i is
// Plan(params).Shard(i).
func (j sleep) Split(_ context.Context, _ jobs.Env, params json.RawMessage) ([][]byte, error) {
	plan, err := j.Plan(params)
	if err != nil {
		return nil, err
	}
	shards := make([][]byte, 0, plan.Len())
	for i := range plan.Len() {
		b, err := plan.Shard(i)
		if err != nil {
			return nil, err
		}
		shards = append(shards, b)
	}
	return shards, nil
}

// Plan makes the shards on demand (jobs.Indexed): the leader of a million-shard sleep job stores
// no plan and holds only its dispatch window.
func (sleep) Plan(params json.RawMessage) (jobs.Plan, error) {
	p, d, err := parseSleepParams(params)
	if err != nil {
		return nil, err
	}
	modes := make(map[int]string, len(p.FailAlways)+len(p.PanicAlways))
	for _, i := range p.FailAlways {
		modes[i] = sleepFailAlways
	}
	for _, i := range p.PanicAlways {
		modes[i] = sleepPanicAlways
	}
	return &sleepPlan{p: p, d: d, modes: modes}, nil
}

type sleepPlan struct {
	p     SleepParams
	d     time.Duration
	modes map[int]string
}

func (s *sleepPlan) Len() int { return s.p.Shards }

func (s *sleepPlan) Shard(i int) ([]byte, error) {
	if i < 0 || i >= s.p.Shards {
		return nil, fmt.Errorf("sleep: shard %d of %d", i, s.p.Shards)
	}
	mode, ok := s.modes[i]
	if !ok && sleepFailsFirst(s.p.Seed, i, s.p.FailRate) {
		mode = sleepFailFirst
	}
	return encodeShardJSON(sleepType, sleepShard{Index: i, Nanos: int64(s.d), Mode: mode})
}

func decodeSleepShard(data []byte) (sleepShard, error) {
	var s sleepShard
	if err := decodeShardJSON(sleepType, data, &s); err != nil {
		return s, err
	}
	switch {
	case s.Index < 0 || s.Index >= jobs.MaxShards:
		return s, fmt.Errorf("%w: sleep: index %d out of range", jobs.ErrBadShard, s.Index)
	case s.Nanos < 0 || s.Nanos > int64(sleepMaxDuration):
		return s, fmt.Errorf("%w: sleep: duration %v out of range", jobs.ErrBadShard, time.Duration(s.Nanos))
	}
	switch s.Mode {
	case sleepOK, sleepFailFirst, sleepFailAlways, sleepPanicAlways:
	default:
		return s, fmt.Errorf("%w: sleep: unknown mode %q", jobs.ErrBadShard, s.Mode)
	}
	return s, nil
}

// Map sleeps the shard's duration precisely (returning ctx.Err() if ctx ends first), then fails or panics
// if the shard's mode says so. The partial is (1, index).
func (sleep) Map(ctx context.Context, _ jobs.Env, task jobs.Task) ([]byte, error) {
	s, err := decodeSleepShard(task.Shard)
	if err != nil {
		return nil, err
	}
	// A precise sleep: a time.Timer in a busy process overshoots 2 ms by ~0.2-0.4 ms (package
	// precise says why), which load tests would count as the system's overhead.
	if err := precise.Sleep(ctx, time.Duration(s.Nanos)); err != nil {
		return nil, err
	}
	switch {
	case s.Mode == sleepFailFirst && task.Attempt <= 1:
		return nil, fmt.Errorf("sleep: shard %d fails on its first attempt (fail_rate)", s.Index)
	case s.Mode == sleepFailAlways:
		return nil, fmt.Errorf("sleep: shard %d fails on every attempt (fail_always), this was attempt %d", s.Index, task.Attempt)
	case s.Mode == sleepPanicAlways:
		panic(fmt.Sprintf("sleep: shard %d panics on every attempt (panic_always), this was attempt %d", s.Index, task.Attempt))
	}
	return encodeSleepPartial(1, uint64(s.Index)), nil
}

func encodeSleepPartial(shards, indexSum uint64) []byte {
	b := appendPartialHeader(nil, tagSleep)
	b = binary.AppendUvarint(b, shards)
	return binary.AppendUvarint(b, indexSum)
}

func decodeSleepPartial(data []byte) (shards, indexSum uint64, err error) {
	r := newPartialReader(data, tagSleep)
	shards, indexSum = r.uvarint(), r.uvarint()
	return shards, indexSum, r.finish()
}

// NewAggregate returns an aggregate counting shards and summing their indices.
func (sleep) NewAggregate(params json.RawMessage) (jobs.Aggregate, error) {
	p, _, err := parseSleepParams(params)
	if err != nil {
		return nil, err
	}
	return &sleepAggregate{limit: uint64(p.Shards)}, nil
}

type sleepAggregate struct {
	limit    uint64 // the job's shards
	shards   uint64
	indexSum uint64
}

// check refuses counts no run of the job could produce.
func (a *sleepAggregate) check(shards, indexSum uint64) error {
	// With indices below limit < 2^20, shards·limit cannot overflow.
	if shards > a.limit || indexSum > shards*(a.limit-1) {
		return fmt.Errorf("%d shards with index sum %d: impossible for a job of %d shards", shards, indexSum, a.limit)
	}
	return nil
}

func (a *sleepAggregate) Merge(partial []byte) error {
	n, sum, err := decodeSleepPartial(partial)
	if err == nil {
		err = a.check(n, sum) // bounds n and sum, so the sums below cannot overflow
	}
	if err == nil {
		err = a.check(a.shards+n, a.indexSum+sum)
	}
	if err != nil {
		return fmt.Errorf("%w: sleep: %v", jobs.ErrBadPartial, err)
	}
	a.shards += n
	a.indexSum += sum
	return nil
}

func (a *sleepAggregate) MarshalBinary() ([]byte, error) {
	return encodeSleepPartial(a.shards, a.indexSum), nil
}

func (a *sleepAggregate) UnmarshalBinary(data []byte) error {
	n, sum, err := decodeSleepPartial(data)
	if err == nil {
		err = a.check(n, sum)
	}
	if err != nil {
		return fmt.Errorf("%w: sleep aggregate: %v", jobs.ErrBadCheckpoint, err)
	}
	a.shards, a.indexSum = n, sum
	return nil
}

func (a *sleepAggregate) Result() (json.RawMessage, error) {
	return json.Marshal(SleepResult{Shards: a.shards, IndexSum: a.indexSum})
}
