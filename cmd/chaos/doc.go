// Command chaos is the fault matrix (`make chaos`).
//
// Each fault gets a real local cluster over internal/harness/rig: Azurite blob and queue, a
// nats-server process and three workers. A job with a known answer runs, and the fault hits it
// mid-job and is healed. Per fault the report says whether the result was exact and how much
// time the fault cost against a no-fault reference run. It also lists what was left behind:
// processes, queue messages, the job's stream messages, active markers.
//
// The faults are listed in matrix.go, one line each. Processes: the leader killed or stopped
// past its lease, every worker killed. Servers: nats-server or azurite-blob killed, the queue
// down during a submit. Messages: forged and garbage results, garbage on the job queue and the
// shards stream, a replay. Jobs: a cancel during a failover, a job whose Merge or Split panics
// (badjob.go). Trust (trust.go): silent partitions, forged heartbeats, a wrong cluster key.
// Schedules (schedule.go): a schedule ticking every 2 s through a leader SIGKILL, a SIGSTOP and
// a storage rollback, each tick making exactly one exact job.
// JetStream (jetstream.go): the store rolled back past acknowledged messages, on one server
// and on a node of an R3 cluster. Chains (chain.go): three jobs, each after and over the
// previous one's output, the leader killed during each.
//
// Guaranteed: each fault runs on a cluster of its own, so one fault's damage never shows up as
// another's. A job not ended Config.Deadline after the heal is reported stuck. The exit status
// is non-zero when any job is wrong, stuck, lost or slow to cancel, or anything is left behind.
// Everything started is stopped by pid, also on failure and Ctrl-C, and the run checks that
// every process it started is gone. Not guaranteed: time lost is a wall-clock figure on a shared
// machine; read it as an order of magnitude.
package main
