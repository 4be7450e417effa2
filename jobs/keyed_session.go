package jobs

import (
	"context"
	"iter"
)

// ReduceTask names one reduce task: the job and the partition it reduces.
type ReduceTask struct {
	JobID     string
	Partition int
}

// PartitionReducer is the optional interface of a KeyedJob that reduces a partition in one
// session, such as an external program that stays alive across the partition's keys. When a job
// has it, the cluster calls ReducePartition once per reduce task, the session's Reduce once per
// key in key order, and then Close.
type PartitionReducer interface {
	ReducePartition(ctx context.Context, task ReduceTask) (ReduceSession, error)
}

// ReduceSession reduces the keys of one partition.
type ReduceSession interface {
	// Reduce takes one key's values, as KeyedJob.Reduce does; it may emit records of earlier keys.
	Reduce(ctx context.Context, key []byte, values iter.Seq[[]byte], emit func(key, value []byte) error) error
	// Close ends the session. With a non-nil emit the partition is complete: Close emits the last
	// records and reports the session's failure. With nil it abandons the session. Close is
	// called once.
	Close(ctx context.Context, emit func(key, value []byte) error) error
}
