// Package builtin holds the job types every stock worker has: primes, pi, wordcount, sleep and
// regroup.
//
//   - primes {"from", "to", "shards"}: count the primes in [from, to) with a segmented sieve.
//   - pi {"samples", "shards", "seed"}: Monte Carlo estimate of π; shard i draws from a PCG
//     generator seeded with (seed, i), so the estimate depends on the parameters only.
//   - wordcount {"container", "prefix", "top", "shard_bytes"}: words across blobs, top-K.
//   - sleep {"shards", "duration", "fail_rate", "seed", "fail_always", "panic_always"}: synthetic
//     shards with scripted failures, for load and failover tests.
//   - regroup {"job" or "container"/"prefix", "by", "agg", "of", "partitions"}: another keyed
//     job's output records grouped by key, value or all, counted or summed (regroup.go).
//
// Their parameter types (PrimesParams, ...) document each field's default and bounds; their result
// types (PrimesResult, ...) are the JSON a job's result holds.
//
// The jobs themselves are reached through Jobs, Register and Registry; their types are not
// exported. primes and pi are written with the typed API (jobs.TypedJob, registered through
// jobs.Typed), as examples of it (primes.go, pi.go); wordcount, whose partials stream, and sleep,
// whose behaviour depends on the attempt, implement the byte-level jobs.Job.
//
// # Encodings
//
// Shard descriptions are small JSON objects (readable when a shard is dead-lettered), decoded
// strictly. Partials are binary: a tag byte naming the job, a version byte, then varints and
// length-prefixed byte strings. Binary keeps wordcount's partials compact and exact: a word may
// hold bytes that are not valid UTF-8, which JSON would rewrite; its words are sorted and
// front-coded (format 2, see wordcount_partial.go; format 1 is still read). An aggregate's checkpoint
// form is a partial of its job, so restoring one decodes a partial. Merge checks a partial against
// the job's parameters where it can (no more primes than numbers in the range, no more samples or
// shards than the job has), so a partial of another job is refused rather than merged.
//
// # How wordcount counts each word once
//
// A word is a maximal run of runes that are not unicode.IsSpace, runes being those a
// left-to-right utf8.DecodeRune of the whole blob yields (an invalid byte is a one-byte non-space
// rune): the same words as strings.FieldsFunc(text, unicode.IsSpace) and `wc -w`. Shards are byte
// ranges [o, o+n) of a blob, and a word belongs to the shard whose range holds its first byte.
// A shard finds the first rune starting at or after o (a byte that is not a UTF-8 continuation
// byte always starts a rune, so looking back 3 bytes tells whether o falls inside a multi-byte
// rune, which then belongs to the previous shard), and decodes the rune before it (reading 8 bytes
// before o is enough) to learn whether a word is already running there; that word is skipped. It
// counts each word starting before o+n, and reads past o+n only to finish its last word. A
// multi-byte space such as U+3000 or U+0085 cut by a boundary is thus decoded whole by both
// shards. Words longer than 1,024 bytes are counted in the total but not ranked, which bounds how
// far a shard reads past its range. Blobs must not change while the job runs; a blob found shorter
// than its shard's range fails the shard.
package builtin

import "github.com/mapagg/mapagg/jobs"

// Jobs returns a new instance of each built-in job: primes, pi, wordcount, sleep and regroup.
// primes and pi are written with the typed API (jobs.Typed); wordcount, whose partials stream,
// sleep, which counts attempts, and regroup, keyed only, implement the byte-level jobs.Job.
func Jobs() []jobs.Job {
	return []jobs.Job{jobs.Typed(primesType, primes{}), jobs.Typed(piType, pi{}), wordcount{}, sleep{}, regroup{}}
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
