// Package builtin holds the job types every stock worker has: primes, pi, wordcount and sleep.
//
//   - primes {"from", "to", "shards"}: count the primes in [from, to) with a segmented sieve.
//   - pi {"samples", "shards", "seed"}: Monte Carlo estimate of π; shard i draws from a PCG
//     generator seeded with (seed, i), so the estimate depends on the parameters only.
//   - wordcount {"container", "prefix", "top", "shard_bytes"}: words across blobs, top-K.
//   - sleep {"shards", "duration", "fail_rate", "seed", "fail_always", "panic_always"}: synthetic
//     shards with scripted failures, for load and failover tests.
//
// Their parameter types (PrimesParams, ...) document each field's default and bounds; their result
// types (PrimesResult, ...) are the JSON a job's result holds.
package builtin

import "github.com/mapagg/mapagg/jobs"

// Jobs returns a new instance of each built-in job: primes, pi, wordcount and sleep. Primes and
// pi are written with the typed API (jobs.Typed); wordcount, whose partials stream, and sleep,
// which counts attempts, implement the byte-level jobs.Job.
func Jobs() []jobs.Job {
	return []jobs.Job{jobs.Typed(primesType, Primes{}), jobs.Typed(piType, Pi{}), Wordcount{}, Sleep{}}
}

// Register adds every built-in job to r.
func Register(r *jobs.Registry) error {
	for _, j := range Jobs() {
		if err := r.Register(j); err != nil {
			return err
		}
	}
	return nil
}

// Registry returns a new registry holding the built-in jobs.
func Registry() *jobs.Registry {
	r := jobs.NewRegistry()
	if err := Register(r); err != nil {
		panic(err) // the built-ins have distinct, valid names
	}
	return r
}
