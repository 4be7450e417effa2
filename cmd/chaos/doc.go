// Command chaos is the fault matrix (`make chaos`): on a real local cluster (Azurite blob and
// queue as two processes, nats-server as a process, three worker processes), it runs jobs whose
// exact answers are known, injects one fault per run mid-job, and reports per fault whether the
// result was exact, how much time the fault cost against a no-fault reference run, and what was
// left behind (processes, queue messages, stream messages of the finished job, active markers).
//
// The faults: the leader killed (SIGKILL) or stopped past its lease (SIGSTOP, then SIGCONT);
// nats-server killed and restarted; azurite-blob killed and restarted (it loses its last seconds
// of acknowledged writes: a storage rollback); azurite-queue down while a job is submitted; every
// worker killed and restarted; a forged result (well-formed, right plan epoch), garbage bytes and
// a well-formed result with a garbage partial published on the job's results subject; garbage
// on the job queue (an invalid id, a 60 KB message) and on the shards stream; a cancel right
// after the leader is killed; a job whose Merge or Split panics, beside the job (badjob.go).
//
// Guaranteed: each fault runs on a cluster of its own, so one fault's damage never shows up as
// another's; a job that does not end within its deadline (Config.Deadline after the fault is
// healed) is reported stuck, never waited on for good; the exit status is non-zero when any job is
// wrong, stuck, lost or (cancel) slow, or anything is left behind; everything started is stopped by
// process id, also on failure and Ctrl-C, and the run checks that every process it started is gone.
// Not guaranteed: time lost is a wall-clock figure on a shared machine; read it as an order of
// magnitude.
package main
