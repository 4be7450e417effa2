// Package election elects one leader among identical processes by an Azure blob lease.
//
// The leader gets a fencing token: the epoch.
//
// Use:
//
//	e, err := election.NewAzure(client, cfg) // cfg.Identity is required
//	err = e.Run(ctx, func(leaderCtx context.Context) error {
//		term, _ := election.TermFromContext(leaderCtx)
//		return coord.Lead(leaderCtx, term.Epoch) // a *coordinator.Coordinator
//	})
//
// Run campaigns until ctx ends. It creates the lease container and blob when they are missing
// (concurrent creators all succeed; an existing blob is never overwritten), then tries to acquire
// the lease every RetryInterval (less jitter), or at once after Poke. The winner bumps the epoch
// and runs lead; the others keep trying. Losing leadership never makes Run return or panic: lead's
// context is cancelled, Run waits for lead, pauses RetryInterval and campaigns again. A panic in
// lead is recovered, logged and ends the term the same way.
//
// # What is guaranteed
//
// Epoch. Every acquisition reads the epoch from the lease blob's metadata and writes epoch+1 (with
// the leader's identity and start time) conditional on the new lease ID, before lead is called.
// Only the lease holder can write that metadata, so epochs strictly increase and no two terms share
// one. If the write fails the lease is given up and lead is not called. Term.Epoch is the fencing
// token; LeaderInfo.Epoch reports it to observers.
//
// Safety deadline. The leader context is cancelled at (monotonic time the last successful renew, or
// the acquire, was sent) + LeaseDuration − SafetyMargin. The server received the request after it
// was sent, so the server's lease cannot end before sent + LeaseDuration. The leader context thus
// ends at least SafetyMargin before anyone else can acquire the lease (provided the two clocks run
// at nearly the same rate, which the margin absorbs). The deadline is a timer of its own: a renew
// call that hangs does not extend it, and renew calls are given per-call timeouts that end by the
// deadline. A definitive refusal (lease ID mismatch, lease lost or broken, 412), or a heartbeat of
// a newer epoch, cancels the leader context at once; transient failures (timeouts, 5xx, connection
// errors) are retried with a short backoff until the deadline. context.Cause of the leader context
// says why it ended (ErrLeadershipLost with ErrLeaseNotHeld, ErrRenewDeadline or ErrUnhealthy,
// ErrSuperseded; or ErrSteppedDown).
//
// Liveness. Config.Healthy is checked before every renewal; when it fails renewing stops, the
// leader context is cancelled and the lease is released, so a coordinator stuck in its main loop is
// replaced. After a crash, a follower acquires within LeaseDuration + RetryInterval, or about
// SuspicionTimeout with heartbeats (below). After a graceful stop the lease is released and
// OnRelease called; followers that are poked (the caller relays the announcement, e.g. over NATS)
// take over within milliseconds.
//
// Fast takeover (Config.Heartbeats set). The leader publishes a Beat (epoch, identity, sequence)
// every HeartbeatInterval from its own process, from the moment it is elected until its leader
// context ends. A follower that has heard a beat of epoch N and then, while its own link to the
// transport stays healthy, hears none of N for SuspicionTimeout, reads the lease blob. When the
// lease is held and the blob's metadata still carries epoch N, it breaks the lease with break
// period 0 on condition If-Match: the ETag it just read, and campaigns at once. Every new term
// rewrites the metadata, which changes the ETag; lease operations (acquire, renew, break) do not.
// So the break can only end the lease of term N, or of a successor that acquired but had not yet
// stamped (whose stamp then fails and who never leads). A break that finds a newer stamp fails with
// ErrConditionNotMet (412); a follower that finds a newer epoch watches it instead.
//
// Fast path (Config.Prober set). The term answers probes on a per-term address. The first successor
// named in the beats (the watcher) probes the live term every WatchEvery (50ms); every other
// follower probes only after ProbeAfter of silence plus its turn (TurnStep a place among the
// successors, the unnamed after all of them), so after a crash the watcher probes alone. "No responders" on every probe over
// ProbeConfirm (at least 3) means the leader's connection is gone: the follower checks and breaks
// the lease as for a suspicion. Probes run in a goroutine of their own, so a probe that times out
// (a paused or cut-off leader keeps its subscription) never delays the suspicion. One follower
// watches, so the cost is constant in the cluster size.
//
// Storage stall. Renewals (every RenewInterval, 1s) double as the leader's check that it reaches
// storage. While no renewal has succeeded for RenewStall (500ms) the leader pauses its beats (it
// still answers probes, and leads on, fenced): a follower that reaches storage then breaks its
// lease after SuspicionTimeout, instead of waiting for the safety deadline. A blip shorter than
// RenewStall + SuspicionTimeout deposes nobody; during an outage of storage itself no follower can
// read the blob, so none breaks. Storage that answers slowly answers everyone slowly: after a
// renewal that succeeded slowly, the stall is twice its time (up to MaxRenewStall, for a minute)
// and a renewal may take four times as long (up to a quarter of the lease), so a leader whose
// storage is loaded is not deposed for it. A follower whose suspicion came from silence, not from
// "no responders", probes the leader after reading the blob: one that answers gets AliveWait to
// beat again (storage that paused for everyone answers its renewal as it answered the read). A
// silence whose probes already ran out their time unanswered is not probed again.
//
// One breaker. The leader's beats name its successors (Config.Successors). After a silence or a
// release the first acts at once; each other follower waits TurnStep per place and stands down when
// it hears the new term. Should two still break, only one acquire wins. A graceful stop stamps the
// term released (MetaReleased) before releasing, so a late follower never breaks a successor that
// has not stamped yet.
//
// Fewer beats for the others (Config.Heartbeats a SuccessorHeartbeats). The named successors
// hear every beat; every other beat goes to them alone, so the others hear half, and allow one
// heartbeat interval more of silence before they probe or suspect (they act after the named ones
// anyway). A term's first beat and every beat whose successors changed go to everyone, so each
// follower learns at once whether it is named, and subscribes to the successors' beats or not.
//
// Quiet followers. A follower that hears the current term's beats sends the lease blob nothing; it
// reads the blob only when the term falls silent, a release is announced (Poke), or it has heard no
// leader. A follower never suspects while its transport reports unhealthy (and the silence clock
// restarts when it comes back), nor before it has heard any other process's beat since Run started,
// nor while it leads. A crashed leader is thus replaced in about SuspicionTimeout + five storage
// round trips instead of LeaseDuration. A leader that hears a beat of a newer epoch than its own
// knows its lease is gone and ends its term at once (ErrSuperseded, with ErrLeaseNotHeld);
// otherwise its next renew is refused (LeaseIdMismatch or LeaseIsBroken…: ErrLeaseNotHeld).
//
// The break changes nothing about fencing: the deposed leader's lease ID can no longer write the
// blob, and its epoch is below the new one, so every conditional, epoch-stamped write it still
// attempts is refused. What heartbeats add is a new way to lose the lease. A live leader whose
// beats do not reach the followers for SuspicionTimeout is deposed: its process starved of CPU for
// that long, or its own link to NATS cut while the followers' work. With beats every 250ms and
// every core saturated on a shared 2-core machine (load average ~13), the gap between two beats
// exceeded the interval by 0.58s at p99 and 1.03s at most in 3 minutes. So the longest gap was
// 1.28s, below the 1.4s default (TestElector_NoFalseTakeoversUnderCPULoad, ELECTION_LOAD=3m). With
// the prober and watcher on, 90s at load average 9–16 gave p99 0.56s, max 0.77s, no suspicion. The
// margin is finite: a process starved of CPU for more than SuspicionTimeout is deposed, safely
// (fenced) but needlessly; raise SuspicionTimeout where that matters more than takeover time.
// During an outage of the transport itself the followers are unhealthy and break nothing. When it
// comes back the leader's beats resume within a reconnect, well inside SuspicionTimeout. So the
// leader changes at most once, and only if its reconnect takes longer than SuspicionTimeout after a
// follower's.
//
// Trust in beats. A Heartbeats transport must deliver only beats of cluster members (package bus
// signs them with the cluster key and drops the rest). Even so, a beat never deposes on its own. A
// leader that hears a newer epoch reads the lease blob and ends its term only when the blob records
// a newer epoch (Stats.Unconfirmed counts the others). A follower breaks only when the blob's epoch
// equals the silent term's. A follower whose blob is behind the epoch it heard watches the blob's
// term again. A beat whose Seq was already heard in its term does not refresh it (a replay cannot
// keep a dead leader's term alive).
//
// Cut off. Heartbeats.Healthy must be the process's own reachability of the transport (round
// trips), not a client's connection state. While it is false the process neither suspects nor
// campaigns: a cut-off leader is replaced once, and cannot take the lease back while cut off.
// Config.Eligible can keep a process from campaigning for reasons of its own (a wrong key).
//
// After the leader context ends, lead still holds the lease while it finishes (graceful stop), but
// its beats have stopped: a lead that takes longer than SuspicionTimeout to return may have its
// lease broken under it. Its final writes must be fenced anyway; a quick final checkpoint
// (milliseconds) is unaffected.
//
// The leader context carries ctx's values (not its cancellation) and the Term.
//
// Graceful stop. When ctx ends while leading: the leader context is cancelled, Run waits for lead
// to return (renewing meanwhile, so the final checkpoint is written while the lease is still held),
// releases the lease, calls OnRelease and returns nil.
//
// # What is not guaranteed
//
// A lease does not stop a process from writing elsewhere. A leader that is paused (GC, swap,
// SIGSTOP, a slow disk) past its deadline learns that its context was cancelled only when it runs
// again, and may in between issue writes to other systems. Two processes may therefore briefly both
// believe they lead. Correctness must come from the epoch: stamp it on every message and
// checkpoint, make every state write conditional (If-Match on the ETag last seen), and refuse input
// from a lower epoch. The coordinator does this; this package only hands out the epoch and ends the
// leader context as early as it safely can.
//
// Observers (Leader, ReadLeader) read the blob's metadata: for the few milliseconds between an
// acquisition and its metadata write they still report the previous leader. They report nil when no
// lease is held.
//
// Storage loss. A leader whose renewal finds the lease blob or its container missing (the account
// was wiped) creates it again, acquires it with its term's lease ID and stamps its own epoch
// before its safety deadline: leadership stays put (EventLeaseRebuilt). A new blob would restart
// the epoch at zero, so every process raises its epoch floor (RaiseEpochFloor) to each epoch it
// hears in a beat: the next term's epoch is above the highest any live member has seen. What no
// live member has seen (every process gone with the storage) cannot be recovered; fencing then
// rests on the epochs written with the state, which went with the storage too.
//
// Cold start. A starting follower that finds the lease held by a term it has heard no beat of
// watches that term as if its last beat had come as it read the blob (EventColdStart). A
// live leader's next beat refreshes it; a dead one is confirmed gone by probes or a silence of
// SuspicionTimeout and broken fenced, as any follower does: after the whole cluster died, the
// first worker back leads in about 2 s instead of waiting out the lease.
//
// # Why not client-go or BlobDistributedMutex
//
// client-go's leaderelection gives no fencing token and its Run returns after the first loss;
// Azure's BlobDistributedMutex takes ~35 s to fail over. Here the fencing epoch is part of the
// protocol, Run keeps campaigning, and a graceful handover takes three round trips after Poke
// (acquire, read and write the epoch).
package election
