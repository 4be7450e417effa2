// Package client submits, inspects, cancels and waits for jobs from outside the cluster.
//
// New builds a Client from the settings the CLI reads (Config). It talks to storage and the
// queue; NATS is optional: it wakes the leader sooner (Notifier) and lets its Validator ask
// the running workers to validate a type this program lacks. A Client can also be assembled by
// hand from its fields.
//
// Guarantees: Submit validates the type and parameters before writing anything, so a refused
// job leaves no trace. It validates locally when Registry has the type, otherwise through
// Validator. A job it accepts has its spec stored before its id is queued; if queueing fails,
// the spec is deleted. Status, List, Query, History, Result and Wait only read storage. Status,
// List, Query and History are metadata only: they read each job's status record (its checkpoint
// blob's metadata) and, when needed, its small spec. They never read a checkpoint or a result, so
// listing costs the same whatever the jobs' sizes. A job that cannot be read is listed with the
// reason. Result and Wait (for a job that succeeded) read the result.
//
// Not guaranteed: a job validated by the cluster can still fail at its leader if the workers that
// validated it leave before it runs; Cancel is a request that the leader honours at its next
// look (a job that finishes first stays finished).
package client
