// Package worker is the follower work that every process does, the leader included: it takes
// shards from the one durable pull consumer all workers share, runs the job's map step, and
// publishes the result on the results stream. It keeps working while the cluster has no leader:
// results wait in JetStream for the next one.
//
// Guarantees:
//   - A shard is acknowledged only after JetStream has stored its result, so a worker killed at
//     any point causes at most a redelivery (after the shard timeout) and a duplicate result,
//     which the coordinator drops.
//   - A map step that errors or panics is retried (redelivered with a backoff) up to MaxAttempts;
//     the last failure is published as an error result naming the shard, the attempts and the
//     last error, and the job fails. A panic never takes the worker down.
//   - Long shards are marked in progress (+WPI) every ProgressInterval, so only a worker that stops
//     (or hangs its process) loses its shard.
//   - Partials above InlinePartialLimit go to a blob and travel as a reference (DESIGN.md §9).
//
// Where this differs from DESIGN.md, and why: the shards consumer has unlimited MaxDeliver and
// the worker enforces the attempt limit from the delivery count. With MaxDeliver = limit, a shard
// whose last attempt died with its worker would just stop being delivered — JetStream only emits
// an advisory, which is lost if no leader is listening — and its job would hang. Here, the next
// delivery past the limit reaches a live worker, which reports the failure as a result that
// waits in the stream for whichever leader comes next.
package worker
