package election

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinels. Test for them with errors.Is: the errors returned by this package wrap them.
var (
	// ErrLeaseNotHeld means the storage service refused an operation because the caller does not
	// hold the lease it named. It expired and someone else acquired it, it was broken, or a
	// different lease ID was given. The service says so with HTTP 409
	// LeaseIdMismatch…/LeaseLost/LeaseNotPresent…, LeaseIsBrokenAndCannotBeRenewed, or any 412
	// precondition failure. It is definitive: a retry with the same lease ID cannot succeed.
	ErrLeaseNotHeld = errors.New("lease not held")

	// ErrLeaseHeld means another holder has the lease (HTTP 409 LeaseAlreadyPresent or
	// LeaseIsBreakingAndCannotBeAcquired). For a follower it is the normal answer to an acquire.
	ErrLeaseHeld = errors.New("lease held by another")

	// ErrConditionNotMet means a conditional Break Lease was refused because the blob's ETag
	// is no longer the one given (HTTP 412): a new term was stamped since it was read, so the
	// lease the caller meant to break is already gone.
	ErrConditionNotMet = errors.New("blob changed since it was read")

	// ErrNotFound means the lease container or blob does not exist (HTTP 404 ContainerNotFound,
	// BlobNotFound).
	ErrNotFound = errors.New("lease container or blob not found")

	// ErrLeadershipLost is the cause (context.Cause) of a leader context that was cancelled because
	// the right to lead ended or may have ended. The lease was refused, the safety deadline passed,
	// Config.Healthy failed, or a heartbeat of a newer term was heard. The cause also wraps the
	// specific reason (ErrLeaseNotHeld, ErrRenewDeadline, ErrUnhealthy, ErrSuperseded with
	// ErrLeaseNotHeld).
	ErrLeadershipLost = errors.New("leadership lost")

	// ErrRenewDeadline means no renewal succeeded in time: the safety deadline
	// (last successful renew sent + LeaseDuration − SafetyMargin) passed.
	ErrRenewDeadline = errors.New("renew deadline passed")

	// ErrUnhealthy means Config.Healthy returned an error, so the leader stopped renewing.
	ErrUnhealthy = errors.New("leader unhealthy")

	// ErrSuperseded means this leader heard a heartbeat of a higher epoch: another process
	// acquired the lease and stamped a newer term, so this one's lease is gone (a break while it
	// was paused or its heartbeats did not arrive). It comes with ErrLeadershipLost and
	// ErrLeaseNotHeld.
	ErrSuperseded = errors.New("superseded by a newer term")

	// ErrSteppedDown is the cause of a leader context cancelled because Run's context ended
	// (graceful stop) or because lead itself returned.
	ErrSteppedDown = errors.New("stepped down")

	// ErrInvalidConfig is wrapped by every error of Config.Validate.
	ErrInvalidConfig = errors.New("election: invalid config")

	// ErrAlreadyRunning is returned by Run when Run is already running on the same Elector.
	ErrAlreadyRunning = errors.New("election: Run is already running on this Elector")
)

// StorageError is a storage call refused by the service, translated by the adapter. Kind is
// one of the sentinels above, or nil when the error is transient (5xx, throttling, …).
// errors.Is(err, Kind) holds, and errors.As reaches the SDK's *azcore.ResponseError.
type StorageError struct {
	Op         string // "acquire lease", "renew lease", …
	StatusCode int    // HTTP status
	Code       string // the service's error code, e.g. "LeaseIdMismatchWithLeaseOperation"
	Kind       error  // ErrLeaseNotHeld, ErrLeaseHeld, ErrNotFound or nil
	Err        error  // the SDK error
	// NotStorage is set when the answer lacks the x-ms-request-id header that Azure Storage
	// and Azurite put on their answers, and its Server header names neither: the endpoint is
	// some other HTTP server.
	NotStorage bool
}

func (e *StorageError) Error() string {
	var b strings.Builder
	b.WriteString(e.Op)
	b.WriteString(": ")
	if e.Kind != nil {
		b.WriteString(e.Kind.Error())
		b.WriteString(" ")
	}
	fmt.Fprintf(&b, "(HTTP %d", e.StatusCode)
	if e.Code != "" {
		b.WriteString(" ")
		b.WriteString(e.Code)
	}
	b.WriteString(")")
	if e.NotStorage {
		b.WriteString(": the answer has no x-ms-request-id, so the endpoint is not Azure Storage (check the BlobEndpoint of the connection string)")
	}
	return b.String()
}

// Unwrap returns the sentinel (if any) and the SDK error.
func (e *StorageError) Unwrap() []error {
	if e.Kind == nil {
		return []error{e.Err}
	}
	return []error{e.Kind, e.Err}
}

// IsDefinitive reports whether err means the lease is gone for good (ErrLeaseNotHeld or
// ErrNotFound), as opposed to a transient failure that may succeed when retried.
func IsDefinitive(err error) bool {
	return errors.Is(err, ErrLeaseNotHeld) || errors.Is(err, ErrNotFound)
}
