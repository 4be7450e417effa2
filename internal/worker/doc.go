// Package worker runs shards: the follower work every process does, the leader included.
//
// It takes shards from the durable pull consumers of the job types it has. There is one consumer
// per type, shared by every worker that has the type. It runs the job's map step and publishes the
// result on the results stream. It keeps working while the cluster has no leader: results wait in
// JetStream for the next one.
//
// Guarantees:
//   - A shard is acknowledged only after JetStream has stored the message with its result, so a
//     worker killed at any point causes at most a redelivery (after the shard timeout, 5s by
//     default) and a duplicate result, which the coordinator drops.
//   - A map step that errors or panics is retried (redelivered with a backoff) up to MaxAttempts;
//     the last failure is published as an error result naming the shard, the attempts and the last
//     error, and the job fails. A panic never takes the worker down.
//   - Every shard a worker holds — running, waiting its turn, or waiting for its result to be
//     stored — is marked in progress (+WPI) every ProgressInterval by one ticker per worker, so
//     only a worker that stops (or hangs its process) loses its shards, and they come back after
//     the bus's shard timeout (default 5s), however long shards run.
//   - A worker pulls only the types in its registry: during a rolling upgrade, a worker that lacks
//     a type never receives (so never fails) its shards; they wait for a worker that has it.
//   - A message may carry several consecutive shards of one job: they run in turn in one slot; if
//     one fails (and may be retried) the whole message is handed back, and the message is settled
//     only once every result message carrying its results is stored.
//   - The hot path has no goroutine, timer or logger per shard, and no JSON: a fixed set of slot
//     goroutines runs shards; one publisher puts every result available at that moment into one
//     message per job (never waiting for more: one result when idle, up to 1024 or 512 KiB under
//     load); one settler acknowledges (or, for a shard that failed for good, terminates) every
//     shard of a message, in publish order, once JetStream stored it. How many shards are held
//     beyond the running ones adapts to their duration (up to Prefetch while they are short, none
//     from 100ms), so slots stay busy on short shards and a few long shards spread over every
//     worker.
//   - Partials above InlinePartialLimit go to a blob and travel as a reference (DESIGN.md §9).
//
// A keyed job's task (keyed.go) runs in the memory budget's share of its slot: a map task writes
// its partitions' sorted runs into one blob, a reduce task merges its partition of every committed
// map blob into one output blob. The result names the blob; the leader commits one.
//
// Where this differs from DESIGN.md, and why: the shards consumer has unlimited MaxDeliver and the
// worker enforces the attempt limit from the delivery count. With MaxDeliver = limit, a shard whose
// last attempt died with its worker would just stop being delivered — JetStream only emits an
// advisory, which is lost if no leader is listening — and its job would hang. Here, the next
// delivery past the limit reaches a live worker, which reports the failure as a result that waits
// in the stream for whichever leader comes next.
package worker
