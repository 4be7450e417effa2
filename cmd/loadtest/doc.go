// Command loadtest is the failover load test and the project's benchmark (`make bench`).
//
// It starts Azurite and a NATS server with JetStream on 127.0.0.1 (or attaches to given
// endpoints), builds the worker binary, and runs clusters of real `worker run` processes
// (internal/harness/cluster), each in a namespace of its own (containers, queue, streams), at the
// worker's default settings unless a scenario says otherwise, through these scenarios
// (--scenarios picks some):
//
//  1. throughput: sleep jobs of zero-duration shards, shards/s from submit to the finished
//     checkpoint, and CPU µs per shard of every process but Azurite. In the same run, a baseline
//     drives the same JetStream round trip, one message per shard, with no coordination (publish
//     shard, fetch + ack, publish result, fetch + ack; same streams, as many consuming
//     connections as workers) at several prefetch depths. Rounds interleave the two so outside
//     load weighs on both alike; the best of each counts.
//  2. efficiency: shards of 2 ms and 5 ms over workers × concurrency slots; ideal makespan
//     (total work ÷ slots) ÷ measured makespan. Beside it: the slots' share of time in map
//     steps (the map times results carry ÷ slots × makespan), the workers' mean map time, and a
//     bare loop of as many goroutines in this process sleeping the same shards with a time.Timer
//     and with the precise sleep the sleep job uses (internal/precise): what the runtime allows.
//  3. small-job: primes below 2·10^7 in 200 shards on an idle cluster; submit→finished median.
//  4. wordcount: a corpus of a 1k-word and of a 200k-word vocabulary (same size, same shards,
//     exact answers computed here), run in turn --wordcount-runs times; the big aggregate's best
//     shards/s ÷ the small one's.
//  5. straggler: a job of 4000 shards of 20 ms (--straggler-shards, --straggler-delay) on a
//     cluster of 10 workers (--straggler-workers) and on one of the same size whose worker w1
//     has ten times the map delay (cluster.Options.WorkerEnv) and takes shards like every other
//     worker; both clusters up, idle in turn, three rounds (--straggler-runs), the best makespan
//     of each counts. Makespan ratio (judged), beside its capacity bound N ÷ (N − 0.9) — one
//     worker at a tenth of the speed leaves N − 0.9 workers' worth — and the seconds beyond it
//     (the tail backup tasks are for), with the shards backed up (with and without the
//     straggler) and the duplicate results per job. The same comparison on --workers (3) workers
//     and 600 shards (--straggler-small-shards, 0 skips it), where the bound alone is 1.43×, is
//     reported against its bound, not judged.
//  6. crash: SIGKILL the leader at a random point between 10% and 90% progress (some runs kill
//     the next leader too); seconds to another worker's "elected" event and to its first merge
//     (events on NATS, see internal/harness/cluster), shards run more than once, exactness.
//  7. graceful: the same with SIGTERM.
//  8. worker-crash: SIGKILL a follower mid-job; time lost against the same job without a kill,
//     shards redone.
//  9. million: a 1,000,000-shard job; the leader's VmRSS (/proc/<pid>/status) and the shard
//     stream's message count sampled every 100 ms; the leader SIGKILLed when half the results
//     are on the wire; exactness.
//  10. nats-outage: a cluster on a NATS server of its own, run as a child process (this binary
//     re-executed with MAPAGG_LOADTEST_NATS_CHILD set), SIGKILLed mid-job for 30 s and started
//     again on the same port and store; leader changes (terms seen in the lease blob, or
//     elected events, whichever is more), exactness, time lost beyond the outage.
//  11. nats-cluster: three clustered in-process NATS servers, R3 streams (STREAM_REPLICAS=3),
//     worker wN connected to node N−1; the leader's node stopped mid-job and restarted;
//     exactness and time lost against the same job without the fault.
//  12. loaded: CPU-bound pi jobs, three in flight, for 10 minutes (--loaded-duration) with
//     nothing killed; every leader change and broke_lease event is a takeover of a live leader.
//
// A killed worker is restarted at once under the same id, so a cluster keeps its size. Failover
// runs are spread over several clusters side by side (--parallel).
//
// How the figures are taken:
//   - Times of elections and first merges are the workers' own event timestamps (same machine
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
