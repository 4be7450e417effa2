package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// ErrInvalidConfig is matched by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("api: invalid config")

// writeError answers err with the status its kind calls for: 400 for a refused job or schedule
// (naming the field at fault), 404 for a missing one, 409 for a conflict with its state, 504 for
// a timeout and 503 for anything else (storage or the cluster failing).
func writeError(w http.ResponseWriter, err error) {
	body := map[string]string{"error": protocol.Redact(err.Error())}
	var pe *jobs.ParamError
	var fe *protocol.FieldError
	switch {
	case errors.As(err, &pe) && pe.Field != "":
		body["field"] = pe.Field
	case errors.As(err, &fe):
		body["field"] = fe.Field
	}
	writeJSON(w, statusOf(err), body)
}

// statusOf maps an error of the client to an HTTP status.
func statusOf(err error) int {
	switch {
	case errors.Is(err, client.ErrNoSuchJob), errors.Is(err, client.ErrNoSuchSchedule):
		return http.StatusNotFound
	case client.Refused(err), errors.Is(err, protocol.ErrBadSchedule):
		return http.StatusBadRequest
	case errors.Is(err, client.ErrNotFinished), errors.Is(err, client.ErrRunning), errors.Is(err, client.ErrScheduleExists):
		return http.StatusConflict
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusServiceUnavailable
}
