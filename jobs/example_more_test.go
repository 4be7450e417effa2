package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
)

// Stats is the min, max and mean of numbers: a partial that is a struct, an identity that is not
// the zero value, and a result computed from the merged partial.
type Stats struct{}

type StatsParams struct {
	Values []int64 `json:"values" jobs:"required"`
}

type Summary struct {
	N             int64
	Sum, Min, Max int64
}

func (Stats) Split(_ context.Context, _ jobs.Env, p StatsParams) ([][]int64, error) {
	var shards [][]int64
	for i := 0; i < len(p.Values); i += 2 {
		shards = append(shards, p.Values[i:min(i+2, len(p.Values))])
	}
	return shards, nil
}

func (Stats) Map(_ context.Context, _ jobs.Env, values []int64) (Summary, error) {
	s := Stats{}.Identity(StatsParams{})
	for _, v := range values {
		s = Stats{}.Merge(s, Summary{N: 1, Sum: v, Min: v, Max: v})
	}
	return s, nil
}

func (Stats) Merge(a, b Summary) Summary {
	return Summary{N: a.N + b.N, Sum: a.Sum + b.Sum, Min: min(a.Min, b.Min), Max: max(a.Max, b.Max)}
}

// Identity is the empty Summary: a min above and a max below every value.
func (Stats) Identity(StatsParams) Summary {
	return Summary{Min: 1<<63 - 1, Max: -1 << 63}
}

// Result is the answer a client reads.
func (Stats) Result(_ StatsParams, s Summary) (any, error) {
	if s.N == 0 {
		return nil, errors.New("no values")
	}
	return map[string]any{"min": s.Min, "max": s.Max, "mean": float64(s.Sum) / float64(s.N)}, nil
}

// A job with the optional methods: Identity (the empty aggregate) and Result (the answer).
func ExampleTyped_optionalMethods() {
	job := jobs.Typed("stats", Stats{})
	res, err := jobstest.Check(job, nil, `{"values": [3, -1, 4, 1, -5, 9, 2]}`)
	fmt.Println(string(res), err)
	// Output: {"max":9,"mean":1.8571428571428572,"min":-5} <nil>
}

// DecodeParams is the strict decoder behind every job's parameters.
func ExampleDecodeParams() {
	var p struct {
		From uint64 `json:"from"`
		To   uint64 `json:"to" jobs:"required"`
	}
	_, err := jobs.DecodeParams("primes", json.RawMessage(`{"from": 5, "To": 10}`), &p)
	fmt.Println(err)
	_, err = jobs.DecodeParams("primes", json.RawMessage(`{"from": -5, "to": 10}`), &p)
	var pe *jobs.ParamError
	fmt.Println(errors.As(err, &pe), pe.Field, errors.Is(err, jobs.ErrBadParams))
	present, err := jobs.DecodeParams("primes", json.RawMessage(`{"to": 10}`), &p)
	fmt.Println(present, p.From, p.To, err)
	// Output:
	// bad parameters for primes: unknown field "To"; allowed fields: from, to
	// true from true
	// map[to:true] 0 10 <nil>
}
