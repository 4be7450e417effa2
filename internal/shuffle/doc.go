// Package shuffle is the data plane of a keyed job (jobs.KeyedJob).
//
// It turns a map task's emitted pairs into one sorted run per reduce partition, and a partition's
// runs into output records, in bounded memory.
//
// The map side is a MapBuffer. It partitions each key by jobs.PartitionOf (FNV-1a, the same in
// every process), combines the values of a key it already holds (its entries are an
// open-addressing table when the job has a combiner), and when its memory budget is full sorts its
// pairs (an in-place radix sort on partition and key prefix, sort.go) and spills them to a local
// file. The runs a map task stores are S2-compressed (run.go). Finish merges the spills and writes one run per
// partition through a Sink (Map does all of this for one task). StorageSink stores each run as an
// object; ConcatSink puts a task's runs in one object, read back by ranges (EnvRuns).
//
// The reduce side is Reduce: a k-way merge (container/heap) of one partition's runs, read as
// streams (io.Reader: a blob download), all opened at once and each read ahead in a goroutine
// (prefetch.go). Equal keys are combined and job.Reduce is called once per
// key in key order. An OutputWriter writes the records as TSV or JSON lines. When there are more
// runs than the budget can read at once, groups of them are first merged into local files.
//
// A run is blocks of length-prefixed records, each block with a CRC-32C, and an end block with the
// counts (see run.go). A flipped bit, a truncation, unsorted keys or a run of another partition are
// errors matching ErrCorruptRun: a bad run fails its task, it is never reduced.
//
// What is guaranteed:
//   - Memory: a MapBuffer holds at most MapConfig.MemoryBytes, and a Reduce's buffers at most
//     ReduceConfig.MemoryBytes, whatever the number of keys, values or runs. A record larger than
//     the block size adds its own size. MapStats.PeakMemory and ReduceStats.PeakMemory measure the
//     buffers held.
//   - Order: within a run and an output partition, records are in encoded-key order (bytes).
//   - A failed task leaves no half-written object: a Sink writer is closed with the error, and
//     PutWriter's Put then stores nothing.
//   - Job code that panics fails the task, not the process.
//
// What is not: which attempt's runs count, naming, and deleting them. That is the coordinator's
// (docs/design.md, "Keyed reduce (data plane)"). Spill files are removed when a task ends, but not
// after a crash of the process: TempDir should be cleared at start.
package shuffle
