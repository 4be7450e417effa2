package main

import (
	"encoding/json"
	"fmt"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
)

// jobSpec is a job the load test submits and knows the exact answer of (see internal/harness/knownjobs).
type jobSpec struct {
	typ    string
	params json.RawMessage
	shards int
	check  func(result json.RawMessage) error // nil error: the exact result
}

func fromKnown(k knownjobs.Job) jobSpec {
	return jobSpec{typ: k.Type, params: k.Params, shards: k.Shards, check: k.Check}
}

// sleepJob is shards sleep shards of duration d (a Go duration, "" for none). Its exact result
// is {"shards": n, "index_sum": n·(n−1)/2}.
func sleepJob(shards int, d string) jobSpec { return fromKnown(knownjobs.Sleep(shards, d)) }

// primesJob counts the primes below to (a key of knownjobs.Pi) in shards shards.
func primesJob(to uint64, shards int) jobSpec { return fromKnown(knownjobs.Primes(to, shards)) }

func (j jobSpec) String() string { return fmt.Sprintf("%s %s", j.typ, j.params) }
