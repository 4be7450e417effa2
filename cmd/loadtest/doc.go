// Command loadtest is the failover load test and the project's benchmark (`make bench`).
//
// It runs clusters of real `worker run` processes over internal/harness/rig, each in a
// namespace of its own on one Azurite and one NATS server (started, or attached to). Unless a
// scenario says otherwise, workers run at their default settings. The scenarios (--scenarios):
//
//  1. throughput: zero-duration sleep shards, submit to finished, and CPU µs per shard (every
//     process but Azurite). Beside it, rig.Baseline: the same JetStream round trip without
//     coordination, at several prefetch depths, batched as the dispatcher does (the yardstick)
//     and one message per shard. Rounds interleave them; the best of each counts.
//  2. efficiency: 2 ms and 5 ms shards over workers × concurrency slots; ideal ÷ measured
//     makespan, the slots' time in map steps, and a bare sleep loop in this process for scale.
//  3. small-job: primes below 2·10^7 in 200 shards on an idle cluster; submit→finished median
//     through the client library and exec→exit of `worker submit --wait`, each ÷ the job's bare
//     compute (Split and every Map in this process, one goroutine a core).
//  4. wordcount: corpora of a 1k- and a 200k-word vocabulary, same size; best shards/s ratio.
//  5. straggler: a job on 10 workers, with and without w1 ten times slower. The makespan ratio is
//     judged beside its capacity bound N ÷ (N − 0.9). The same on 3 workers is reported only.
//  6. crash: SIGKILL the leader between 10% and 90% progress (some runs kill the next leader
//     too); seconds to another worker's election and to its first merge.
//  7. graceful: the same with SIGTERM.
//  8. worker-crash: SIGKILL a follower mid-job; time lost and shards redone.
//  9. million: a 1,000,000-shard job; leader RSS and shard backlog sampled every 100 ms; the
//     leader SIGKILLed at 50%.
//  10. nats-outage: a cluster on a nats-server process of its own, SIGKILLed mid-job for 30 s
//     and restarted on its port and store; leader changes and time lost beyond the outage.
//  11. nats-cluster: three clustered NATS nodes, R3 streams; the leader's node stopped mid-job.
//  12. loaded: CPU-bound pi jobs for 10 minutes with nothing killed; every leader change or
//     lease break is a takeover of a live leader.
//  13. class-*: takeover by failure class (failclass.go), --failclass-runs jobs each on a
//     cluster of its own: class-sigkill, class-sigstop, class-nats-cut and class-storage-cut
//     (the leader's link through a blackholing proxy), class-nats-restart, class-nats-node (the
//     node leading the results stream of a 3-node nats-server cluster). Each reports fault →
//     first probe, → detected, → lease broken, → new leader, → first merge. --failclass-env
//     passes worker settings (HEARTBEAT_INTERVAL, WATCH_EVERY, PROBE_CONFIRM) to compare them.
//  14. keyed: wordcount "output":"blob" at default settings over a 5M-word corpus (about 174 MB)
//     and a 50k-word one repeated to the same size (--keyed-vocabularies), in interleaved rounds
//     with the optimized and the naive single-process count of the same files on local disk
//     (internal/harness/corpus/wcount): wall and CPU-seconds of every process (workers, this
//     process with NATS, Azurite); Dask once; `worker status` with ten 100 MB results.
//  15. keyed-loaded: the 5M-word keyed job --keyed-loaded-runs times beside pi jobs: exact, leader
//     changes, every worker's peak RSS.
//  16. csv-sum: a newcomer's keyed per-user sum (the test worker's csvsum) over 2M CSV rows of
//     100k users against a naive single-process Go program (internal/harness/corpus/csvsum).
//  17. programs: issue 34's program jobs, the word counts of examples/programs/wordcount.py and
//     wordcount.sh on 2 workers at concurrency 1 over a 174 MiB corpus of 50k Zipf-like words
//     (--programs-mb), in interleaved rounds (--programs-rounds) with one Python Counter process
//     and one awk process over the same files: wall and CPU-seconds, the workers' programs
//     included. Skipped, with the reason in the report, where python3 is missing.
//  18. long-read: one Map (the test worker's slow-lines) reads one 1 MiB range for 60 s, four
//     times the storage client's time per try; it must succeed exactly.
//  19. thousand: simulated members (internal/harness/sim), many to a process, grown 3 → 100 →
//     300 → 1,000 (thousand.go; docs/limits.md).
//  20. schedules: 300 schedules every second (overlap allow) for 60 s (30 for 10 s with --quick),
//     then all deleted: fired + skipped + missed against due ticks, lateness, jobs after a
//     DELETE, blobs left, leader changes (schedules.go).
//
// A killed worker restarts at once under its id. Failover runs share several clusters (--parallel).
//
// How the figures are taken:
//   - Election and merge times are the workers' own events (the machine's clock, like the kill).
//   - Progress is the job's checkpoint; makespans end at its FinishedAt.
//   - A core NATS subscription sees every shard and result message (rig.Sniffer). A shard with
//     two results, or a result of attempt > 1, ran twice. A completed shard run again after a
//     kill must never happen; shards redone per kill are bounded by what a worker holds.
//
// Output: a JSON report (--json), a Markdown summary (--markdown and stdout) and an SVG
// timeline (--plot). It exits non-zero on a wrong result or a lost job (--strict: also on a
// missed target). `--quick` is the one-minute correctness run. Everything it starts is stopped
// on exit, failure and Ctrl-C.
//
// Not measured: separate machines (everything shares these CPUs), failover of NATS or storage.
package main
