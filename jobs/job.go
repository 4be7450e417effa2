package jobs

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
)

// Job is the byte-level interface of a job type, which the coordinator and the workers call: the
// coordinator calls Validate, Split and NewAggregate; every worker calls Map. Most jobs are
// written as a TypedJob and adapted with Typed; implement Job directly to control the bytes of
// shards and partials (the built-in wordcount streams its partials). Register it with Register
// (or Registry.Register).
//
// Contract:
//   - Split is deterministic given its inputs and is called once per job: the leader stores the
//     resulting plan, so a later leader never re-splits (storage listed by Split may change).
//   - Each shard is a small self-contained description of work (a range, a blob name and byte
//     range): at most MaxShardBytes. Map receives only the shard, never the job's parameters.
//   - Map is a pure function of the shard (and the data it names): running it twice gives the same
//     partial. It may run more than once for a shard (retries, redelivery); only one result counts.
//   - Aggregate.Merge is associative and commutative, so the final result equals a sequential run
//     whatever the order of shards.
type Job interface {
	// Type is the registered name, e.g. "primes".
	Type() string
	// Validate checks raw parameters without touching storage. It is called at submit time,
	// before anything is written, and returns an error that says what is wrong.
	Validate(params json.RawMessage) error
	// Split divides the job into shards. It may read storage through env.
	Split(ctx context.Context, env Env, params json.RawMessage) ([][]byte, error)
	// Map processes one shard and returns its encoded partial.
	Map(ctx context.Context, env Env, task Task) ([]byte, error)
	// NewAggregate returns the empty aggregate for a job with these parameters.
	NewAggregate(params json.RawMessage) (Aggregate, error)
}

// Task is one execution of a shard's map step.
type Task struct {
	JobID   string
	Index   int    // shard index, 0-based
	Attempt int    // 1 for the first delivery
	Shard   []byte // the shard description produced by Split
}

// Aggregate accumulates partials. The coordinator keeps it in memory, merges each partial into it
// once, and checkpoints it with MarshalBinary.
type Aggregate interface {
	// Merge folds one encoded partial (as returned by Map) into the aggregate.
	Merge(partial []byte) error
	// MarshalBinary encodes the aggregate for a checkpoint.
	MarshalBinary() ([]byte, error)
	// UnmarshalBinary restores an aggregate from a checkpoint, replacing its contents.
	UnmarshalBinary(data []byte) error
	// Result is the job's final answer as JSON.
	Result() (json.RawMessage, error)
}

// Env is the storage a job may read (in production Azure Blob Storage, in tests Azurite) and the
// logger of its code.
type Env interface {
	// ListBlobs lists the blobs in container whose names start with prefix, in name order.
	ListBlobs(ctx context.Context, container, prefix string) ([]BlobInfo, error)
	// ReadRange reads count bytes of a blob from offset (fewer at the end of the blob).
	ReadRange(ctx context.Context, container, name string, offset, count int64) (io.ReadCloser, error)
	// Logger is where job code logs. In Map on a worker its lines go to the job's log (worker
	// logs JOB), each with the worker, shard and attempt; they are kept while the attempt runs
	// and written when it ends (one append, also when Map fails or panics), at most
	// 1000 lines an attempt. Elsewhere (Split on the leader, package jobstest) they go to the
	// process's log. Never nil.
	Logger() *slog.Logger
}

// BlobInfo names a blob and its size in bytes.
type BlobInfo struct {
	Name string
	Size int64
}

// Limits on what travels through NATS and what a submitter may send.
const (
	// MaxShardBytes bounds one shard description.
	MaxShardBytes = 4 << 10
	// MaxSpecBytes bounds an encoded job spec (type, parameters and metadata).
	MaxSpecBytes = 64 << 10
	// MaxShards bounds the number of shards in one job.
	MaxShards = 1_000_000
)

// Snapshotter is the optional interface of an Aggregate that is checkpointed without stopping
// merges, for aggregates large enough that encoding them takes a while (a vocabulary of words).
// Snapshot is called on the leader's merge loop and should be cheap (a copy of counters, not an
// encoding). The function it returns encodes the aggregate as it was at the call, exactly what
// MarshalBinary would have returned then. It runs in another goroutine while Merge goes on.
// The coordinator runs at most one such function per aggregate at a time, and calls Snapshot
// again only after the previous function returned.
type Snapshotter interface {
	Snapshot() (encode func() ([]byte, error))
}
