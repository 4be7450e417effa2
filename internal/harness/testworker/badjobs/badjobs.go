// Package badjobs holds job types with the bugs a new job author makes, for tests of isolation.
//
// Each fails in one place of its code, on the leader or on the workers. The test worker binary
// (internal/harness/testworker) registers them beside the built-ins.
//
//   - bad-merge: Merge writes into its nil map (the zero value of the partial).
//   - bad-split: Split indexes past its slice.
//   - bad-check: Check dereferences a nil pointer.
//   - bad-result: Result panics.
//   - permanent: Map returns jobs.Permanent (a parse error in the data) for shard 1.
//
// Each takes {"shards": n} (1 to 1,000, default 4).
package badjobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/jobs"
)

// Types are the bad job types, in the order of the package doc.
var Types = []string{"bad-merge", "bad-split", "bad-check", "bad-result", "permanent"}

// Params are the parameters of every bad type.
type Params struct {
	Shards int `json:"shards"`
}

// Validate implements jobs.Validator.
func (p *Params) Validate() error {
	if p.Shards == 0 {
		p.Shards = 4
	}
	if p.Shards < 1 || p.Shards > 1000 {
		return jobs.BadParam("shards", `"shards" must be 1 to 1000 (got %d)`, p.Shards)
	}
	return nil
}

// Counts is a partial: a count per key.
type Counts map[string]int

func split(p Params) []int {
	shards := make([]int, p.Shards)
	for i := range shards {
		shards[i] = i
	}
	return shards
}

func count(shard int) Counts { return Counts{fmt.Sprintf("k%d", shard%3): 1} }

// mergeCounts adds b into a: correct only once a is made (the bug of bad-merge: it never is).
func mergeCounts(a, b Counts) Counts {
	for k, v := range b {
		a[k] += v
	}
	return a
}

// BadMerge merges into the zero value of Counts, a nil map.
type BadMerge struct{}

func (BadMerge) Split(_ context.Context, _ jobs.Env, p Params) ([]int, error) { return split(p), nil }
func (BadMerge) Map(_ context.Context, _ jobs.Env, s int) (Counts, error)     { return count(s), nil }
func (BadMerge) Merge(a, b Counts) Counts                                     { return mergeCounts(a, b) }

// BadSplit reads one shard past the end of its plan.
type BadSplit struct{}

func (BadSplit) Split(_ context.Context, _ jobs.Env, p Params) ([]int, error) {
	shards := split(p)
	last := shards[len(shards)] // the bug: len, not len-1
	return append(shards, last), nil
}
func (BadSplit) Map(_ context.Context, _ jobs.Env, s int) (Counts, error) { return count(s), nil }
func (BadSplit) Merge(a, b Counts) Counts                                 { return okMerge(a, b) }

// BadCheck dereferences a limit it never set.
type BadCheck struct{ limit *int }

func (BadCheck) Split(_ context.Context, _ jobs.Env, p Params) ([]int, error) { return split(p), nil }
func (BadCheck) Map(_ context.Context, _ jobs.Env, s int) (Counts, error)     { return count(s), nil }
func (BadCheck) Merge(a, b Counts) Counts                                     { return okMerge(a, b) }
func (c BadCheck) Check(_ Params, _, partial Counts) error {
	if len(partial) > *c.limit { // the bug: limit is nil
		return errors.New("too many keys")
	}
	return nil
}

// BadResult panics making its answer.
type BadResult struct{}

func (BadResult) Split(_ context.Context, _ jobs.Env, p Params) ([]int, error) { return split(p), nil }
func (BadResult) Map(_ context.Context, _ jobs.Env, s int) (Counts, error)     { return count(s), nil }
func (BadResult) Merge(a, b Counts) Counts                                     { return okMerge(a, b) }
func (BadResult) Result(_ Params, acc Counts) (any, error) {
	panic(fmt.Sprintf("bad-result: cannot summarize %d keys", len(acc)))
}

// Permanent fails shard 1 with a permanent error: its data cannot be parsed.
type Permanent struct{}

func (Permanent) Split(_ context.Context, _ jobs.Env, p Params) ([]int, error) { return split(p), nil }
func (Permanent) Map(_ context.Context, _ jobs.Env, s int) (Counts, error) {
	if s == 1 {
		return nil, jobs.Permanent(fmt.Errorf("parse record %d: unexpected byte 0xff", s))
	}
	return count(s), nil
}
func (Permanent) Merge(a, b Counts) Counts { return okMerge(a, b) }

func okMerge(a, b Counts) Counts {
	if a == nil {
		a = Counts{}
	}
	return mergeCounts(a, b)
}

// Register adds the bad types to r.
func Register(r *jobs.Registry) error {
	for _, j := range []jobs.Job{
		jobs.Typed("bad-merge", jobs.TypedJob[Params, int, Counts](BadMerge{})),
		jobs.Typed("bad-split", jobs.TypedJob[Params, int, Counts](BadSplit{})),
		jobs.Typed("bad-check", jobs.TypedJob[Params, int, Counts](BadCheck{})),
		jobs.Typed("bad-result", jobs.TypedJob[Params, int, Counts](BadResult{})),
		jobs.Typed("permanent", jobs.TypedJob[Params, int, Counts](Permanent{})),
	} {
		if err := r.Register(j); err != nil {
			return err
		}
	}
	return nil
}

// Registry returns the built-in types and the bad ones.
func Registry() *jobs.Registry {
	r := builtin.Registry()
	if err := Register(r); err != nil {
		panic(err) // distinct, valid names
	}
	return r
}
