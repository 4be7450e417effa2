package jobs

// State is where a job is in its life.
type State string

// The states of a job. Queued jobs have a spec and no checkpoint yet. A waiting job was taken
// by a leader that lacks its type: it runs once a leader that has the type is elected.
const (
	StateQueued    State = "queued"
	StateWaiting   State = "waiting"
	StateRunning   State = "running"
	StateSucceeded State = "succeeded"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
)

// Terminal reports whether the job will not change again.
func (s State) Terminal() bool {
	return s == StateSucceeded || s == StateFailed || s == StateCancelled
}
