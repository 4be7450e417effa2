// Package coordinator is the leader's work: intake, plan, dispatch, merge and checkpoint.
//
// It takes jobs from the queue, splits them into shards, dispatches the shards on JetStream, merges
// results, checkpoints and finalizes. It runs under the leader context the elector hands out
// (Lead), one call per term, and imports neither the election nor the worker package.
//
// # Components
//
// Each part owns its state and sees the others through small interfaces it declares; none holds
// the term. The parts that need nothing of the loop's are packages of their own, below this one:
//   - core: Config, the ports (Store, Queue, Bus, Metrics), Event, the errors, and Isolate (user
//     code's panics and errors as *UserCodeError). This package names them by alias.
//   - fence: the term's epoch and id, and the fencing checks of what other terms wrote.
//   - jobread: read-only views of jobs the term does not hold.
//   - lifecycle: what follows a job's end (clean-up, retry, ended markers and their migration,
//     retention) and its Sweeper, which deletes ended jobs' active markers in batches.
//   - schedule: each schedule's state; it fires ticks through a submitter (intake).
//
// The parts that share the loop's job type stay here, one file a chapter. Read them in this
// order: each file names only what the files after it declare, but for one knot: job.go names
// the runner (runner.go), whose methods take the job, and what a runner asks of its host names
// keyedRun (keyed.go). TestLayout_ReadingOrder keeps it so.
//   - coordinator.go: the Coordinator, Lead, and the term's loop (loop, onDispatched): it owns
//     job state, dispatch and merge (raft's leaderLoop) and calls the chapters below.
//   - The term's chapters, each a part of the loop's work on the jobs it holds: cancel.go
//     (cancel hints and markers), merge.go (a result merged), backup.go (backup copies
//     published), claim.go (a job claimed and adopted: rescan, ensure, claim, load, adopt),
//     keyedterm.go (the term's side of keyed jobs), repair.go (self-repair), finish.go (a job's
//     end: end, fail, retire), fair.go (each job's window).
//   - Intake's chapters: intakeloop.go (read → admit → plan → commit), branching into
//     waiting.go, after.go and smalljob.go (light jobs, intake's side and the term's).
//   - term.go: the term's state: its components and config, the channels its loop reads, and
//     the little state only the loop touches (cancel hints, fair dispatch's rates).
//   - intake.go (intake's state and the steps its chapters share), visibility.go (the messages
//     it keeps hidden).
//   - The other components: the shard sender (dispatch.go) publishes; the checkpointer
//     (checkpoint.go) writes in flight, and tells a job lost with the storage (lost.go); the
//     planner (plan.go) splits and chooses a job's runner; the job table (jobtable.go) owns which
//     jobs are active, waiting, finished, requeued and being cleaned.
//   - A job's runner, chosen by its kind: keyedRun commits map and reduce tasks (keyed.go);
//     runner.go declares the runner and what it asks of its host, and aggregateRun merges
//     partials.
//   - isolate.go (calling a job's code), job.go (one job's in-memory state, with each
//     component's part of it), straggler.go (a job's backup bookkeeping), then events.go,
//     status.go, queuehealth.go and face.go (the names of core this package uses).
//
// The term holds its components and the Coordinator's config and ports as plain fields.
//
// One result: the results feed → term.onResult (merge.go) → the job's runner merges or commits
// it → the checkpointer stores the checkpoint, fenced, then acknowledges the message → at the last
// shard the term stores the result (finish.go) and hands the job to the lifecycle. One shard:
// intake reads the queue → the planner splits the job → the term adopts it into the job table →
// its dispatcher takes the shards from the planner and the shard sender publishes them within the
// job's fair share (fair.go).
//
// # Exactly-once aggregation
//
// A job's checkpoint (<job>/checkpoint) holds its aggregate and the roaring bitmap of merged
// shards, written together in one conditional blob write. A result is merged only if its shard is
// not in the bitmap, and it is acknowledged on the results stream only after the checkpoint that
// includes it is stored. A results message may carry several results of one job (workers batch what
// finishes together). It is acknowledged only after the checkpoint that includes every result of it
// is stored. If one of its results cannot be merged yet (its large partial is unreadable), the
// whole message is handed back. The results of it already merged then return as duplicates, which
// the bitmap drops. So after any crash the next leader finds each shard either in the checkpoint
// (and a redelivered duplicate is dropped) or not (and its result is still in the stream): never
// both, never neither.
//
// # Fencing
//
// The election epoch is the fencing token, and it is enforced on the checkpoint, the only state
// that matters:
//   - Every checkpoint write is If-Match on the ETag this leader last wrote or read, and carries
//     WriterEpoch. A new leader first claims each running job: it reads the checkpoint and writes
//     it back with its own epoch. From then on, a deposed leader's writes fail (its ETag is stale)
//     and it stops (ErrDeposed) without acknowledging anything.
//   - If a deposed leader's write lands between the new leader's read and its claim, the claim
//     fails, the new leader re-reads (the stored WriterEpoch is lower) and claims again — the late
//     write only merged valid results, which the bitmap now shows as done.
//   - A first checkpoint is If-None-Match: two leaders racing to plan one job cannot both win, and
//     the loser follows the winner's plan.
//
// Where this refines DESIGN.md, and why: shards and results carry the job's plan epoch (the epoch
// of the leader that planned it), not the dispatching leader's. A new leader does not re-dispatch
// shards still queued, so results of shards dispatched by an earlier leader of the same plan are
// valid and must be merged; dropping them by "older epoch" would lose work. What must never be
// merged is a result of a different plan (a wordcount plan lists blobs that may have changed):
// plans are stored per epoch (<job>/plan-<epoch>/<page>), and a result whose epoch is not the job's
// plan epoch is dropped. Nats-Msg-Id stays <job>/<shard>: within one plan a re-dispatch is a
// duplicate.
//
// # Failover
//
// On election the coordinator lists active/ markers and claims every running job. It recreates the
// results consumer, so results the dead leader fetched but did not acknowledge arrive at once. It
// resumes dispatch from the checkpoint's Dispatched mark: shards already queued are not sent again,
// and an overlap with the dead leader's last batch is deduplicated by Nats-Msg-Id.
//
// # Small jobs
//
// A message on its first delivery, of an indexed job, is taken in light (smalljob.go): nothing is
// stored until the job's first checkpoint, created If-None-Match (its final one, or, after one
// checkpoint interval, with the active marker before it); the hidden queue message is its record
// until then. A leader that dies before that write leaves the message, which comes back and is
// taken in the full way under a new plan epoch. Not guaranteed: `worker status` shows such a job
// queued until that write.
//
// # Checkpoint cost
//
// The tick checkpoints a job only when it is due: after max(CheckpointInterval, 10 × what its last
// checkpoint took to encode and write), at most 50 × CheckpointInterval. So checkpointing takes
// about a tenth of the merge loop whatever the aggregate's size, and a big aggregate is written
// less often instead of stalling merging. CheckpointEvery (merged messages awaiting a checkpoint)
// still forces one, which bounds what the results consumer holds unacknowledged. Checkpoints are
// written in the background, double-buffered: the loop encodes the done-bitmap and snapshots the
// aggregate at one moment (a consistent pair) and hands the rest to a goroutine, then merges on
// into the live state. An aggregate that is a jobs.Snapshotter (the built-in wordcount) is only
// copied in the loop; the writer encodes it, and the checkpoint's JSON, off the loop. For a
// 200k-word vocabulary the copy costs the loop 0.7–1.7 ms instead of 27–60 ms of sorting and
// encoding (BenchmarkWordcountMergeCheckpointing in builtin/). Any other aggregate is encoded in
// the loop (small ones are cheap). Either way what is stored is the pair as it was at the snapshot;
// when the write is stored the loop acknowledges exactly the results the snapshot covered. At most
// one write per job is in flight, so each is If-Match on the ETag of the one before (fencing
// unchanged); a failed write puts its results back with the next one. Stepping down waits for
// writes in flight, then writes a final checkpoint.
//
// # Backup tasks
//
// Near a job's end (every shard dispatched, at most a quarter left: Spark's speculation quantile),
// a shard that has been held much longer than its peers is published once more (backup.go). The
// leader does not see shards start, but workers pull a job's shards in dispatch order, so a shard
// still missing when a later one is merged has been pulled: it is overtaken. A shard is a straggler
// when it was overtaken longer ago than 2 × the median run time of the job's recent shards (times
// ShardsPerMsg). That wait is at least 100ms (Spark's minTaskRuntime), or 20ms once every shard of
// the job was pulled and workers are going idle. The last shards dispatched (at most 64 of them)
// are stragglers too once no result has come for that long. Each is published once per term (up to
// 1024 per job and term), made or read from the plan as dispatch does. Its Nats-Msg-Id is
// <job>/<shard>/backup/<term id>, so JetStream drops it neither as a duplicate of the original nor
// as one of an earlier term's backup. Whichever worker pulls it first runs it. The first result of
// each shard is merged; the other is a duplicate. Not guaranteed: that the copy goes to a faster
// worker than the original (it usually goes to one of the idle workers at the end). Nor that no
// shard is backed up needlessly: a worker stalled for the wait looks like a straggler, and the copy
// then costs one extra run of that shard. After a stall of the loop itself, no shard is backed up
// for as long again.
//
// # Shards per message
//
// A big job's consecutive shards travel several to a message, and so do a smaller job's when its
// type's shards ran short last time (pace.go) (ShardsPerMsg, decided when the job is
// planned and kept in its checkpoint): message k carries shards [k·n, (k+1)·n) and has Nats-Msg-Id
// <job>/<k·n>. Dispatch always cuts messages at multiples of n, so a new leader resuming from the
// checkpoint's Dispatched mark re-publishes exactly the messages the old one may have published,
// with the same ids, which JetStream drops within its duplicate window. Merging stays per shard
// (the bitmap), so a message redelivered after some of its results were merged only adds
// duplicates.
//
// # Windowed, fair dispatch
//
// A job's dispatcher keeps at most its window of shards dispatched and not merged, so the shards
// stream's backlog is bounded whatever the job's size. A new leader resumes the window from the
// checkpoint's Dispatched mark. Workers pull a type's shards in stream order, so the windows are
// fair (fair.go). A type's in-stream shards are kept to its measured merge rate × (FairHorizon + 2
// shard times). They are split among its running jobs by priority weight (2^priority), at most
// DispatchWindow a job. A small job behind a big one starts within about FairHorizon.
//
// # Status records
//
// Every checkpoint write also sets the blob's metadata to the job's status record
// (protocol.StatusRecord: state, counts, times, error): the same conditional write, so it is fenced
// like the checkpoint. Status readers take it with a HEAD, never the checkpoint.
//
// # Plans
//
// A job's shards are never all in the leader's memory after intake, so leader memory is bounded by
// the window, not the job. A 1,000,000-shard sleep job runs, with a takeover half-way, in a 40 MiB
// live heap for the whole test process; its plan alone would take 85 MiB.
// A plan is of one of two kinds:
//   - A job type that is jobs.Indexed (primes, pi, sleep; a TypedJob with Count and Shard) has a
//     plan that is a function of its parameters. Nothing is stored but the shard count: the
//     checkpoint says Plan "indexed", and shard i is made from the spec's parameters when the
//     window reaches it — by the planning leader or any later one.
//   - Any other job (Split lists storage: wordcount) is split once at intake and its plan stored in
//     pages of protocol.PlanPageShards (512) shards, <job>/plan-<epoch>/<p>, each with its index
//     and a CRC-32 (Plan "pages"). The dispatcher reads a page when the window reaches it, and
//     holds one page at most; a page that is corrupt, missing or of another position fails the job,
//     naming the page, rather than running a shard nobody planned. A page that cannot be read for
//     now (storage unavailable) is retried.
//
// Not guaranteed: the split of a stored plan is still held whole at intake, while its pages are
// written (Split returns a slice); the leader gives each page back once it is encoded.
//
// # Self-repair
//
// Exactly-once rests on every dispatched shard being, at each moment, in one of four places. It is
// queued or held by a worker (the shards stream is a work queue: a message stays until it is
// acknowledged), waiting as a result (likewise the results stream), merged (the done-bitmap), or in
// this term's dispatcher. Some failures can leave a shard in none of them, and nothing would then
// ever bring it back. One is a checkpoint that goes back in time after its results were
// acknowledged (Azurite loses the last ~5 s of blob writes on kill -9); others are a lost JetStream
// write or a purge. Every RepairInterval (default 2s) the leader looks at each running job that
// made no progress since its last look. Suppose neither stream holds a message of the job
// (JobBacklog: stream info with a subject filter) on two looks in a row with no merge between. Then
// the shards dispatched and not merged are missing. Up to RepairMaxShards of them are dispatched
// again with Nats-Msg-Id <job>/<first>/repair/<round>, distinct from the original dispatch, from
// backups and from other rounds. A result arriving late for a repaired shard is a duplicate. After
// RepairRounds (default 5) rounds without a merge the job fails with a reason that names a few of
// the missing shards and their count (and the last refused result, if any): a job can no longer sit
// running forever. Guaranteed: a running job with missing shards is repaired within about three
// RepairIntervals of going quiet. Not guaranteed: repair of a job whose plan blob is gone (it fails
// instead). The check is read-only and runs only for jobs with no progress, so it costs nothing
// while results flow. Workers give every result message a unique Nats-Msg-Id, so the result of a
// repaired shard (attempt 1 again) is never dropped as a duplicate of the lost one.
//
// # Refused results
//
// Some results are dead-lettered with their reason (bus.DeadLetter, source "results"): one whose
// partial the aggregate refuses (Merge fails; the aggregate is unchanged), or whose shard index is
// outside the plan. The job goes on: the shard stays missing until its real result arrives or
// self-repair runs it again. A shard the worker reports failed for good (an error result: its
// attempts ran out) still fails the job, naming the shard.
//
// # Fencing across a storage rollback
//
// Epochs come from the lease blob's metadata, which a storage rollback can take back in time, so a
// new term may get an epoch already used (or a lower one). Every checkpoint also names its writer
// term (WriterTerm, a random id per term). A term stops with ErrDeposed when it finds a checkpoint
// written by a higher epoch, or by its own epoch under another term; the error names both terms.
// The coordinator records the highest epoch of any checkpoint it read (HighestEpochSeen) and the
// node raises its elector's floor above it (election.Elector.RaiseEpochFloor), so the process's
// next term takes an epoch no term used. A claim is the first write of a term to a job and reads
// the checkpoint first, so two terms of one epoch never both write to a job. A cancel marker is
// read when a job is claimed, so a cancel issued while no leader listened takes effect right after
// the election.
//
// # Finishing
//
// A job finishes the moment its last result is merged. The final checkpoint, with the result and
// state succeeded, is written then, inside the merge loop, fenced like every other write. It leaves
// out the aggregate: an ended job is never resumed, so a big one does not delay the end. The
// results it covers are acknowledged after it is stored. Other jobs' results wait for the next tick
// (CheckpointInterval) or for CheckpointEvery merged results.
//
// # User code
//
// Every call of a job's code runs through isolate (isolate.go). A panic fails that job only, with a
// *UserCodeError naming the call, the panic and the user's frame; the term goes on. A job whose
// code panics while a new leader resumes it is stored as failed, so no leader loops on it. A job
// whose type this leader lacks is stored as waiting and runs under a leader that has it
// (waiting.go).
//
// # Time: schedules, chains, retries, retention
//
// Stages of their own, started by the term. Schedules (schedule.go) fire each tick once: a tick
// marker created If-None-Match and fenced by epoch, and a job id derived from the tick. A job
// submitted --after others waits until they succeed (after.go). A failed job with retries left is
// submitted again in its clean-up (retry.go). Retention (retention.go) deletes jobs whose time is
// up, a batch a pass, found by their ended markers.
//
// # Keyed jobs
//
// A keyed job (keyed.go) is planned as its map tasks, then one reduce task per partition, all
// ordinary shards whose messages say the kind keyed. Its runner's state is the commit record: the first result of each task names the blob
// that counts, stored with the done-bitmap, so exactly one attempt per task is committed. The
// reduce tasks are dispatched once a stored checkpoint commits every map task and the map manifest
// is written from it. The result is the manifest of the output blobs; the leader never reads a key.
// Intermediates are deleted from a listing when the job ends.
//
// Not guaranteed: a job whose map step is not deterministic gets whichever result arrives first.
// Results and shards are at-least-once; only merging is exactly-once.
package coordinator
