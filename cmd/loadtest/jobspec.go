package main

import (
	"encoding/json"
	"fmt"

	"github.com/mapagg/mapagg/builtin"
)

// jobSpec is a job the load test submits and knows the exact answer of.
type jobSpec struct {
	typ    string
	params json.RawMessage
	shards int
	check  func(result json.RawMessage) error // nil error: the exact result
}

// sleepJob is shards sleep shards of duration d (a Go duration, "" for none). Its exact result
// is {"shards": n, "index_sum": n·(n−1)/2}.
func sleepJob(shards int, d string) jobSpec {
	p, _ := json.Marshal(builtin.SleepParams{Shards: shards, Duration: d})
	return jobSpec{typ: "sleep", params: p, shards: shards, check: func(res json.RawMessage) error {
		var r builtin.SleepResult
		if err := json.Unmarshal(res, &r); err != nil {
			return fmt.Errorf("sleep result %s: %v", res, err)
		}
		n := uint64(shards)
		if r.Shards != n || r.IndexSum != n*(n-1)/2 {
			return fmt.Errorf("sleep result %s: want shards %d, index_sum %d", res, n, n*(n-1)/2)
		}
		return nil
	}}
}

// knownPi holds π(x), the number of primes below x, for the ranges the load test uses.
var knownPi = map[uint64]uint64{10_000_000: 664_579, 20_000_000: 1_270_607}

// primesJob counts the primes below to (a key of knownPi) in shards shards.
func primesJob(to uint64, shards int) jobSpec {
	want, ok := knownPi[to]
	if !ok {
		panic(fmt.Sprintf("primesJob: π(%d) unknown", to))
	}
	p, _ := json.Marshal(builtin.PrimesParams{To: to, Shards: shards})
	return jobSpec{typ: "primes", params: p, shards: shards, check: func(res json.RawMessage) error {
		var r builtin.PrimesResult
		if err := json.Unmarshal(res, &r); err != nil {
			return fmt.Errorf("primes result %s: %v", res, err)
		}
		if r.Count != want {
			return fmt.Errorf("primes result %s: want count %d (π(%d))", res, want, to)
		}
		return nil
	}}
}

func (j jobSpec) String() string { return fmt.Sprintf("%s %s", j.typ, j.params) }
