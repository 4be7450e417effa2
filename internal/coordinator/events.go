package coordinator

import (
	"errors"
	"log/slog"
)

// reporter is what a component of a term logs and reports with: its log and the term's events
// (emit stamps the term's epoch).
type reporter struct {
	log  *slog.Logger
	emit func(Event)
}

// codeFailed reports err if it is a job's code failing (see fail): logged with its stack, and
// an EventJobCodeFailed.
func (r reporter) codeFailed(id string, err error) {
	var ue *UserCodeError
	if !errors.As(err, &ue) {
		return
	}
	r.log.Error("job code failed on the leader; the job fails, the term goes on", "job", id, "type", ue.Type,
		"call", ue.Call, "err", err, "stack", ue.Stack)
	r.emit(Event{Kind: EventJobCodeFailed, Job: id, Err: err})
}
