// Package jobstore is a job's life in storage: read, submit, retry and delete, written once.
//
// The client (the CLI, the HTTP API and Go programs) and the leader (automatic retries,
// retention) both call it, so a job is submitted, copied for a retry and deleted the same way
// whoever does it.
//
// Guaranteed: a submitted job's spec is stored (If-None-Match) before its id is queued, and is
// removed again if queueing fails; a retry copies the whole spec (priority, schedule, retries,
// dependencies, params) and changes only its id, its retry_of and its submission time. A job is
// deleted spec last, so it is listed until everything else is gone, and its ended marker after
// the spec, so a deletion that stops half-way is finished by the leader's retention. Deletes by
// the leader are fenced (Jobs.Fence) as its checkpoints are.
//
// Not guaranteed: a client's delete is not fenced; it refuses a job that has not ended, and a
// leader finishing that job's clean-up meanwhile may leave a result copy, which the second
// listing of a delete removes.
package jobstore
