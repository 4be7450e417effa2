// Package jobs is the job model of mapagg: what a job is, how it is split into shards, how a
// shard is mapped to a partial result and how partials are aggregated; the registry of job
// types; and the built-in jobs. It imports the standard library only, and neither storage nor
// messaging: a job reads storage through the small Env interface that its caller provides.
//
// # The job model
//
// A job has a type and JSON parameters. The coordinator (on the leader) looks the type up in a
// Registry, calls Validate at submit time, Split once to get the shards, and NewAggregate to get an
// empty Aggregate into which it merges each shard's partial exactly once. Any worker calls Map on a
// shard. The contract, stated in full on Job:
//
//   - Validate checks parameters without touching storage, and says what is wrong.
//   - Split is deterministic and called once per job; the plan is stored, never recomputed.
//   - A shard is a small self-contained description of work (at most MaxShardBytes); Map gets the
//     shard, never the parameters.
//   - Map is a pure function of the shard and the data it names. It may run more than once for a
//     shard (retries, redelivery, failover); only one result counts.
//   - Aggregate.Merge is associative and commutative, so the result equals a sequential run.
//     MarshalBinary/UnmarshalBinary carry the aggregate through checkpoints.
//
// # Adding a job type
//
// Implement Job (and an Aggregate for it) and register it before the worker starts:
//
//	func main() {
//		if err := jobs.Register(myJob{}); err != nil {
//			log.Fatal(err)
//		}
//		// ... run the worker as cmd/worker does
//	}
//
// Register adds to the process-wide Default registry, which starts with the built-ins; a program
// that wants another set builds its own with NewRegistry. Type names are unique. Lookup of an
// unknown type returns an *UnknownTypeError (matching ErrUnknownType) that lists the known types.
//
// # Errors
//
// Bad parameters are a *ParamError (matching ErrBadParams) naming the field and saying what is
// allowed. Map fails with an error matching ErrBadShard for a shard it cannot decode; Merge fails
// with ErrBadPartial for a partial it cannot decode and then leaves the aggregate unchanged;
// UnmarshalBinary fails with ErrBadCheckpoint. The built-ins' decoders never panic on any input
// (each has a fuzz target) and bound what they allocate by the input's size.
//
// # The built-in jobs
//
//   - primes {"from", "to", "shards"}: count the primes in [from, to) with a segmented sieve.
//   - pi {"samples", "shards", "seed"}: Monte Carlo estimate of π; shard i draws from a PCG
//     generator seeded with (seed, i), so the estimate depends on the parameters only.
//   - wordcount {"container", "prefix", "top", "shard_bytes"}: words across blobs, top-K.
//   - sleep {"shards", "duration", "fail_rate", "seed", "fail_always", "panic_always"}: synthetic
//     shards with scripted failures, for load and failover tests.
//
// Their parameter types (PrimesParams, ...) document each field's default and bounds; their result
// types (PrimesResult, ...) are the JSON Result returns.
//
// Encodings: shard descriptions are small JSON objects (readable when a shard is dead-lettered),
// decoded strictly. Partials are binary: a tag byte naming the job, a version byte, then varints
// and length-prefixed byte strings. Binary keeps wordcount's partials compact and exact: a word
// may hold bytes that are not valid UTF-8, which JSON would rewrite. An aggregate's checkpoint
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
package jobs
