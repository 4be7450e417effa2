// Package client is what a user (the CLI, the load test, a program of one's own) does with the
// cluster without being part of it: submit a job, read its status and result, cancel it, wait for
// it. It talks to storage and the queue; NATS is optional and never imported here: a Notifier
// wakes the leader sooner, and a Validator (package node provides one over NATS) validates a job
// type this program does not have by asking the running cluster.
//
// Guarantees: Submit validates the type and parameters before writing anything (locally when
// Registry has the type, otherwise through Validator), so a refused job leaves no trace; a job it
// accepts has its spec stored before its id is queued, and if queueing fails the spec is deleted.
// Status, List, Result and Wait only read storage. Status and List are metadata only: they read
// each job's status record (its checkpoint blob's metadata) and, when needed, its small spec,
// never a checkpoint or a result, so listing costs the same whatever the jobs' sizes; a job
// that cannot be read is listed with the reason. Result and Wait (for a job that succeeded)
// read the result.
//
// Not guaranteed: a job validated by the cluster can still fail at its leader if the workers that
// validated it leave before it runs; Cancel is a request that the leader honours at its next
// look (a job that finishes first stays finished).
package client
