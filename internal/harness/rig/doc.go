// Package rig is what the chaos matrix, the load test and the demo share.
//
// It owns the servers and clusters of a run and tracks every process by pid. It holds the
// faults, the observers and the report's plumbing.
//
// A Rig either shares one Azurite and one NATS server between namespaced clusters (the load
// test, the demo), or gives every cluster servers of its own that a fault may kill (the chaos
// matrix). A new chaos fault or load-test scenario should need nothing else. By file:
//
//   - rig.go: New, Start (a cluster for a Spec; Spec.TestWorker runs the test worker), Stop,
//     Close, Track and TrackPID, LeftRunning.
//   - extra.go: Extra (a worker outside the cluster's set, e.g. misconfigured), Proxied (one
//     behind a fault proxy on its NATS or job-queue Link), WaitMember.
//   - faults.go: Leader, Signal, KillLeader, WaitElected, FailLeader (kill the leader, wait for
//     the next election; Failover.FirstMerge times its first merge), KillAll, Detected (how
//     followers learned of it), HandTo (make a given worker leader), RestartNATS.
//   - natsnodes.go: StartNATSNodes, NATSNodes.Place (a Spec on R3 nodes), JetStream,
//     LeaderNode, WaitNewLeader; WorkerIDs, SpreadNATS.
//   - jobs.go: Submit, Await, Judge, Reference (the no-fault run), Status, WaitProgress,
//     WaitEnd, Final, PlannedAfter, KeepRunning (n jobs in flight for a while), Strike (a job to
//     hit when a fraction of its results is on the wire), Ready.
//   - observe.go: Sampler (checkpoint readings, Await), Sniffer (every shard and result message;
//     Rig.StartSniffed starts a cluster with one), WatchResults, WatchLease, Changes, CountEvents, Elections, WaitFirstMerge, Every.
//   - streams.go: JetStream, JobStore, UpdateStream (change a stream, restore it), Publish (from
//     a plain client without the cluster key), Record (copy a job's messages to replay them),
//     LastSeqs, WaitSeqs.
//   - leftovers.go: Leftovers (markers, stream and queue messages a job left), DeadLetters,
//     StreamCount, WaitGone.
//   - probe.go: Readyz, WaitReady, SumMetric (a counter over the workers' /metrics).
//   - proc.go: ProcCPU, ProcRSS, LeaderRSS, ClusterCPU. redo.go: Classify (shards run twice after kills).
//     lastpercent.go: LastPercent (how long a job's last 1 % of shards took).
//   - flags.go: ParseList, JoinList (comma-separated flag values).
//   - chain.go: ChainSteps (wordcount → regroup → regroup), RunChain (leader killed during each
//     step), CheckChain (against CorpusWords), ChainLeftovers.
//   - report.go: Header, Markdown (Figure, List), WriteJSON, WriteReport, Interruptible, Sayer,
//     the exit statuses, Num, P50P90, Round3, Clip, Cell. The reports themselves are in package
//     report.
//   - progress.go: Progress (a bar on a terminal, timestamped lines otherwise).
//   - baseline.go: Baseline (the JetStream round trip without coordination), SleepRefs (a bare
//     sleep loop). dist.go: Summarize, Single. timeline.go: WriteSVG, WriteSVGFile, Elect, Elects,
//     ElectionMarks. parallel.go: Parallel (n workers over one task queue).
//   - keyedrun.go: RunKeyedWordcount (a keyed wordcount of a corpus, every record checked),
//     SampleRSS, PutBigResultJobs, TimeCommand. The corpora and the single-process baselines
//     they are judged against are in package corpus.
package rig
