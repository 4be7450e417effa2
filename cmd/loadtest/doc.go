// Command loadtest is the failover load test and the project's benchmark (`make bench`).
//
// It starts Azurite and a NATS server with JetStream on 127.0.0.1 (or attaches to given
// endpoints), builds the worker binary, and runs clusters of real `worker run` processes
// (internal/cluster), each in a namespace of its own (containers, queue, streams), through
// five scenarios:
//
//  1. Throughput: sleep jobs of zero-duration shards, shards/s from submit to the finished
//     checkpoint. In the same run, a baseline drives the same JetStream round trip with no
//     coordination (publish shard, fetch + ack, publish result, fetch + ack; same streams, same
//     message bodies, as many consuming connections as workers) at several prefetch depths.
//     Rounds interleave the two so outside load weighs on both alike; the best of each counts.
//  2. Efficiency: shards of a fixed duration over workers × concurrency slots; ideal makespan
//     (total work ÷ slots) ÷ measured makespan.
//  3. Crash failover: SIGKILL the leader at a random point between 10% and 90% progress (some
//     runs kill the next leader too); seconds to another worker's "elected" event and to its
//     first merge (events on NATS, see internal/cluster), shards run more than once, exactness.
//  4. Graceful handover: the same with SIGTERM.
//  5. Worker crash: SIGKILL a follower mid-job; time lost against the same job without a kill,
//     shards redone.
//
// A killed worker is restarted at once under the same id, so a cluster keeps its size. Failover
// runs are spread over several clusters side by side (--parallel): a crash run mostly waits for
// the 15 s lease to expire, so this divides the wall time without changing what is measured.
//
// How the figures are taken:
//   - Times of elections and first merges are the workers' own log timestamps (same machine
//     clock as the signal). Makespans end at the checkpoint's FinishedAt.
//   - Progress is read from the job's checkpoint blob (what a leader has merged and written).
//   - Every shard execution is seen without touching the system: a core NATS subscription on the
//     results and shards subjects receives a copy of every message JetStream stores (job, shard,
//     attempt, worker). A shard with a result of attempt > 1, or with two results, was run more
//     than once. If the first of two results came from a process other than a killed one (before
//     it exited), a completed shard was re-run: the target is that this never happens. The
//     number of shards redone after one kill must not exceed what a worker holds unacknowledged
//     (concurrency running + concurrency prefetched + 1 handed over).
//
// Output: a JSON report (--json), a Markdown summary (--markdown, and stdout) with p50/p90/max
// of every figure, and an SVG timeline (--plot) of a few runs with kills and elections marked.
// It exits non-zero when any job ends with a wrong result or is lost (--strict: also when a
// target is missed). `loadtest --quick` (and TestQuick, which runs it under go test) is the
// small correctness-only version. Everything it starts is stopped on exit, on failure and on
// Ctrl-C; worker and Azurite processes also die with it (parent-death signal).
//
// Not measured: throughput on separate machines (everything shares this machine's CPUs), or
// failover of NATS or storage themselves.
package main
