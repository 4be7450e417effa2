// Package membership says over core NATS who is in the cluster and what happened to it.
//
// Every worker announces itself (Announcement) about once a second on Names.Members(). A Watcher
// keeps the set of workers heard from recently: the leader's all the time, a follower's on
// demand, so traffic grows with N, not N². Workers publish their election and coordinator
// events (Event) on Names.Events() for tools and tests.
//
// Guaranteed: a worker that stops announcing leaves the live set within the expiry given to
// Watch (default three announce intervals). Decoders refuse malformed or oversized messages with
// an error that says what is wrong. Not guaranteed: delivery. These are hints on core NATS (at most once); the
// leader's identity of record is the lease blob, and an event missed by a subscriber is gone
// (each worker also keeps its recent events at /api/events).
package membership
