package core

import (
	"time"
)

// EventKind names something the coordinator did. Tools and tests subscribe to these
// (Config.OnEvent) instead of reading log lines; the log lines are for people.
type EventKind string

// The events a coordinator reports.
const (
	// EventTermStarted: the coordinator resumed every running job of its term (Count: how many)
	// and opened the results feed; it is now merging.
	EventTermStarted EventKind = "term_started"
	// EventFirstMerge: the first result of the term was merged (Job, Shard).
	EventFirstMerge EventKind = "first_merge"
	// EventJobPlanned: a job was taken off the queue, split (Count: shards) and checkpointed.
	EventJobPlanned EventKind = "job_planned"
	// EventJobResumed: a job became active in this term: claimed from its checkpoint, or just
	// planned (Count: shards done).
	EventJobResumed EventKind = "job_resumed"
	// EventJobFinished: a job's terminal checkpoint was written (State; Err holds the reason of a
	// failed or cancelled job).
	EventJobFinished EventKind = "job_finished"
	// EventDeadLettered: a message was refused and stored in the dead-letter stream (Err: why).
	EventDeadLettered EventKind = "dead_lettered"
	// EventRepaired: self-repair dispatched again shards of Job that were nowhere (Count: how
	// many).
	EventRepaired EventKind = "repaired"
	// EventBackup: backup tasks dispatched once more shards of Job that ran much longer than
	// their peers near the job's end (Count: how many; Shard: the first).
	EventBackup EventKind = "backup"
	// EventJobCodeFailed: a job type's code panicked or failed on the leader (Job; Err: a
	// *UserCodeError naming the call, the panic and the user's frame). The job fails; the term
	// goes on.
	EventJobCodeFailed EventKind = "job_code_failed"
	// EventJobWaiting: a job waits for a leader that has its type (Job; Err: the reason).
	EventJobWaiting EventKind = "job_waiting"
	// EventJobRetried: a failed job was submitted again (Job: the retry; Count: its attempt).
	EventJobRetried EventKind = "job_retried"
	// EventJobDeleted: retention deleted an expired job (Job, State).
	EventJobDeleted EventKind = "job_deleted"
	// EventTickFired: a schedule's tick made its job (Job).
	EventTickFired EventKind = "tick_fired"
	// EventTickSkipped: a schedule's tick made no job: the previous one (Job) still runs.
	EventTickSkipped EventKind = "tick_skipped"
	// EventTermEnded: Lead returned (Err: why, nil for a graceful stop).
	EventTermEnded EventKind = "term_ended"
)

// Event is one thing the coordinator did.
type Event struct {
	Kind  EventKind
	Epoch uint64 // the term's epoch
	Job   string // the job concerned, if any
	Shard int    // the shard concerned (EventFirstMerge), else 0
	State string // a finished job's state
	Count int    // see the kinds
	Err   error
	At    time.Time
}
