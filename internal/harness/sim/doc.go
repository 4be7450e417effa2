// Package sim runs a simulated cluster: many members to a process, each a real node.
//
// A member is node.Serve with its own NATS connection, its own storage client (a
// storecount.Counting over an HTTP pool of its own) and HTTP off: the real election, membership,
// heartbeats, health prober, coordinator and shard consumers. A Host runs any number of members
// in one process; Cluster runs hosts as processes (cmd simhost) against one NATS server and one
// Azurite, and can grow, crash a member and count storage requests.
//
// A crash is what a dead process looks like from outside: the member's storage requests fail
// at once, its NATS connection is closed under it (its sockets are opened by a dialer of its own
// that Crash cuts, so the server sees the socket close and probes find no responders), and then its
// goroutines are stopped. No release is sent: the lease and the NATS announcement both fail.
//
// Not simulated: separate machines. Every member shares the host's CPUs, and a host's members
// share one Go runtime, so a member's idle CPU here is below a process's (no runtime of its own).
package sim
