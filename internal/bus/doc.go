// Package bus carries shards, results and control messages over NATS JetStream.
//
// The shards stream is a work queue: shards of job type T go on <prefix>.shards.<T>.<job>, with
// one durable pull consumer per type shared by the workers that have it, so filters never
// overlap. The results stream is a work queue with one consumer, owned by the current leader.
// Beside them are a dead-letter stream and core-NATS control subjects (leader released, job
// submitted, job cancelled).
//
// Guarantees:
//   - A shard or result published here is stored by JetStream before the publish returns (or its
//     future resolves); nothing in flight is lost while there is no leader.
//   - Every shard and result is authenticated (auth.go): it carries a MAC of the cluster key over
//     its subject, Nats-Msg-Id and body. A feed hands on only deliveries whose MAC verifies; any
//     other is dead-lettered (reason "unauthenticated: …") and terminated. Message ids below
//     get a keyed suffix (Keyring.TagMsgID), so nobody without the key can take a genuine
//     message's id first.
//   - Shard publishes carry Nats-Msg-Id = <job>/<index> (of the message's first shard, when it
//     carries several), so a new leader re-publishing a message the old leader already published
//     within DuplicateWindow adds nothing.
//   - A results message carries <job>/batch/<nonce>, unique (it is never re-published: a failed
//     publish redelivers its shards), so the result of a shard run again is never dropped as a
//     duplicate. Backup copies of shards carry <job>/<index>/backup/<term id>, shards dispatched
//     again by self-repair <job>/<first>/repair/<round>.
//   - A ShardFeed tracks every shard it pulled until it is settled and marks them all in progress
//     with one ticker, so a short ShardTimeout (default 5s) only bounds how long a dead worker's
//     shards wait. It pulls exactly the credit its owner gives it (no untracked prefetch).
//   - OpenResults deletes and recreates the leader's consumer, so results a dead leader had fetched
//     but not acknowledged are delivered at once, not after AckWait.
//   - A stream or consumer found missing (removed by an operator, lost by a server) is created
//     again by the member that finds it, with Ensure's settings, and reported (a log line and
//     Config.OnRebuilt, heal.go); the publish is made again and the feed goes on. A results feed
//     recreates only its own consumer, and ends instead when a newer leader's consumer is there.
//
// Not guaranteed: order across jobs, or exactly-once delivery (consumers see duplicates; the
// coordinator's done-bitmap makes merging exactly-once).
package bus
