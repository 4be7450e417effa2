// Package jobs defines the job types a mapagg cluster runs.
//
// A job is a map/aggregate computation. The cluster splits it into shards, maps them on every
// worker, merges each exactly once on the leader and checkpoints, so that it survives the death
// of any process, the leader included.
//
// # Your first job
//
// Write the parameters, a shard and a partial result as Go types, and three methods:
//
//	type SumSquares struct{}
//
//	type Params struct {
//		N      int64 `json:"n" jobs:"required"`
//		Shards int   `json:"shards" jobs:"required"`
//	}
//
//	type Span struct{ Lo, Hi int64 }
//
//	func (SumSquares) Split(_ context.Context, _ jobs.Env, p Params) ([]Span, error) {
//		var spans []Span
//		for i := range int64(p.Shards) {
//			spans = append(spans, Span{p.N * i / int64(p.Shards), p.N * (i + 1) / int64(p.Shards)})
//		}
//		return spans, nil
//	}
//
//	func (SumSquares) Map(_ context.Context, env jobs.Env, s Span) (int64, error) {
//		env.Logger().Info("summing", "lo", s.Lo, "hi", s.Hi) // in the job's log: worker logs JOB
//		var sum int64
//		for i := s.Lo; i < s.Hi; i++ {
//			sum += i * i
//		}
//		return sum, nil
//	}
//
//	func (SumSquares) Merge(a, b int64) int64 { return a + b }
//
// then register it and run the node (package node) in your own main:
//
//	func main() {
//		if err := jobs.Register(jobs.Typed("sumsq", SumSquares{})); err != nil {
//			log.Fatal(err)
//		}
//		node.Main(node.Options{Registry: jobs.Default()})
//	}
//
// That binary is a complete worker (`mybinary run`) and client (`mybinary submit --type sumsq
// --params '{"n": 1000, "shards": 4}' --wait`). Test the job in-process with package jobstest:
// jobstest.Run(t, jobs.Typed("sumsq", SumSquares{}), nil, `{"n": 1000, "shards": 4}`) checks the
// contract below and returns the result. examples/histogram in the repository is a whole program
// that reads its input from blobs, with an end-to-end test on a real cluster.
//
// # The contract
//
//   - Parameters are a JSON object decoded once into your struct by DecodeParams: unknown fields
//     are refused, names match exactly, fields tagged `jobs:"required"` must be present. Give the
//     struct a Validate() error method to check values (return BadParam(field, ...) to name the
//     field), and a Usage() string method to show an example when a field is missing. Validation
//     runs at submit time, before anything is written.
//   - Split runs once per job, on the leader; the shards are stored, never recomputed, so Split
//     may read storage that changes later. A shard describes its work completely (Map never sees
//     the parameters) in at most MaxShardBytes, and a job has at most MaxShards shards.
//   - Map runs on any worker, perhaps more than once for a shard (retries, redelivery, failover):
//     it must be a pure function of the shard and the data it names. Only one result per shard is
//     ever merged. TaskFrom(ctx) tells Map its job id, shard index and attempt. env.Logger()
//     is where Map logs: on a worker its lines go to the job's log (`worker logs JOB`), each
//     with the worker, shard and attempt, written when the attempt ends (a keyed job's Reduce,
//     which gets no Env, logs through LoggerFrom(ctx)). A Map error is
//     retried; return Permanent(err) when retrying cannot help (a parse error in the data): the
//     shard then fails at once, and the job fails naming the shard and err.
//   - Merge must be associative and commutative, with the zero value of the partial as its
//     identity, so the result equals a sequential run whatever order the shards finish in. Sum
//     integers rather than floats (a float sum depends on the order by rounding).
//
// The leader calls Split, Merge, Check, Identity and Result for every job. A panic there fails
// that job only, with the panic and the frame of your code in its error; the cluster goes on.
//
// Optional methods refine the defaults (see TypedJob): a shard's Validate, an Identity other than
// the zero value, and a Result other than the merged partial. A Check refuses partials no run
// could produce (a count larger than the range, say), so that a corrupt or foreign partial is
// refused rather than merged.
//
// A job whose shards are a function of its parameters (a range cut into parts, a number of
// samples) should add Count(p) and Shard(p, i) — Split's length and its shard i (WithIndex). The
// leader then stores no plan and makes each shard as it dispatches it: a job of a million shards
// costs it the memory of its dispatch window, not of its plan (byte-level: Indexed). A byte-level
// Aggregate that is large (a vocabulary) should be a Snapshotter, so that checkpointing it costs
// the leader's merge loop a copy, not an encoding.
//
// # Keyed jobs: big answers as output blobs
//
// A job whose answer is large (a total per customer, every word's count) is a keyed job: Map
// emits key/value pairs, the cluster partitions them by key, sorts and combines them, and Reduce
// turns each key's values into output records written to blob storage, one object per partition.
// The leader holds none of it. The total sold per customer, over CSV blobs of "customer,amount":
//
//	type SalesByCustomer struct{}
//
//	func (SalesByCustomer) Split(ctx context.Context, env jobs.Env, in jobs.BlobInput) ([]jobs.BlobRange, error) {
//		return in.Split(ctx, env)
//	}
//
//	func (SalesByCustomer) Map(ctx context.Context, env jobs.Env, r jobs.BlobRange, emit jobs.Emitter[string, int64]) error {
//		return jobs.Lines(ctx, env, r, func(line []byte) error {
//			customer, amount, _ := bytes.Cut(line, []byte(","))
//			n, err := strconv.ParseInt(string(amount), 10, 64)
//			if err != nil {
//				return fmt.Errorf("line %q: %w", line, err)
//			}
//			emit(string(customer), n)
//			return nil
//		})
//	}
//
//	func (SalesByCustomer) Combine(a, b int64) int64 { return a + b }
//
//	func (SalesByCustomer) Reduce(_ context.Context, _ string, sums iter.Seq[int64], emit func(int64)) error {
//		var total int64
//		for s := range sums {
//			total += s
//		}
//		emit(total)
//		return nil
//	}
//
// Keyed("sales", SalesByCustomer{}) makes it a KeyedJob; jobstest.RunKeyed tests it. The output is
// one `customer<TAB>total` line per customer, sorted by key within a partition. Combine is optional:
// with it, each map task sends one value per key instead of one per line. The rules:
//
//   - Map must be a pure function of the shard; it may emit the same key many times.
//   - Combine must be associative and commutative; values are combined in any grouping, or not.
//   - Reduce must not depend on the order of a key's values. It sees each key once, in one
//     partition. Partitions(p) chooses the partition count; by default the cluster does.
//   - Keys are encoded so that byte order is key order for strings, integers, floats and booleans.
//     Other key types (MarshalBinary, or JSON) are sorted by their encoded bytes.
//
// # Encodings, and why JSON
//
// Shards, partials and the aggregate's checkpoint are encoded for you: as JSON, decoded strictly
// (unknown fields, trailing data and a Go array's JSON list of another length refused, shards
// bounded by MaxShardBytes). A type with
// MarshalBinary and UnmarshalBinary (on its pointer) is encoded with those instead: the
// built-in primes and pi keep their compact binary partials that way. JSON holds no NaN or ±Inf;
// encoding one fails with an error that says so.
//
// JSON was chosen by measurement (BenchmarkTypedShard and BenchmarkTypedPartial, encode plus
// decode, `go test -run '^$' -bench Typed ./jobs/` on the shared 2-core machine of 2026-11-21):
//
//	                         JSON (default)        MarshalBinary        gob (one stream per message)
//	shard {blob, off, len}   3.9 µs, 12 allocs     1.1 µs, 6 allocs     50 µs, 178 allocs
//	partial int64            1.8 µs,  8 allocs     -                    -
//	partial 16-bucket hist   5.6 µs, 13 allocs     0.5 µs, 6 allocs     25 µs, 189 allocs
//
// A shard costs the cluster hundreds of microseconds of messaging (publish, deliver, acknowledge,
// result) whatever its encoding, so JSON's few microseconds are a few percent at most. They buy
// shards that read well when a shard is dead-lettered, and types that need no code to encode. gob
// sends its type description with every message, which makes it the slowest and the largest.
// Where the encoding does matter (large partials), write MarshalBinary.
//
// # The byte-level interface
//
// Typed adapts a TypedJob to Job and Aggregate, the interfaces the coordinator and the workers
// call. Implement those directly when you need control of the bytes: the built-in wordcount
// does, to stream its partials. The same rules hold, and the errors are:
//
//   - bad parameters: a *ParamError (matching ErrBadParams) naming the field and what is allowed;
//   - Map of a shard it cannot decode: an error matching ErrBadShard;
//   - Merge of a partial it cannot decode or refuses: ErrBadPartial, the aggregate unchanged;
//   - UnmarshalBinary of a bad checkpoint: ErrBadCheckpoint, the aggregate unchanged.
//
// Every decoder of such outside input should have a fuzz target (jobstest.FuzzAggregate,
// jobstest.FuzzParams) and bound what it allocates by the size of its input.
//
// # Registries
//
// Register adds a job to the process-wide Default registry, which node.Main serves; NewRegistry
// makes another. Type names are unique, 1 to 64 letters, digits, '-', '_' or '.'. Looking up an
// unknown type gives an *UnknownTypeError (matching ErrUnknownType) listing the known ones. The
// built-in jobs (primes, pi, wordcount, sleep) are in package builtin, which the stock worker
// binary registers.
//
// This package imports the standard library only: a job reads storage through Env, which its
// caller provides (Azure Blob Storage in a cluster, jobstest.Env in a test).
package jobs
