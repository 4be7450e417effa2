package coordinator

import "github.com/mapagg/mapagg/internal/coordinator/core"

// The coordinator's public face: its config, ports, events and errors are declared in core
// (shared with the components) and named here.

type (
	// Config configures a Coordinator (core.Config).
	Config = core.Config
	// Store is the jobs container (core.Store).
	Store = core.Store
	// Queue is the intake queue (core.Queue).
	Queue = core.Queue
	// Bus is the message bus (core.Bus).
	Bus = core.Bus
	// Metrics receives the coordinator's measurements (core.Metrics).
	Metrics = core.Metrics
	// Event is one thing the coordinator did (core.Event).
	Event = core.Event
	// EventKind names something the coordinator did (core.EventKind).
	EventKind = core.EventKind
	// UserCodeError is a job type's code failing on the leader (core.UserCodeError).
	UserCodeError = core.UserCodeError
)

// DefaultConfig returns the defaults that zero fields of a Config take.
func DefaultConfig() Config { return core.DefaultConfig() }

// DefaultPartitions is a keyed job's partition count when neither the job nor the cluster
// chooses one.
const DefaultPartitions = core.DefaultPartitions

// The coordinator's errors (core).
var (
	ErrInvalidConfig = core.ErrInvalidConfig
	ErrDeposed       = core.ErrDeposed
	ErrStalled       = core.ErrStalled
)

// The events a coordinator reports (core).
const (
	EventTermStarted   = core.EventTermStarted
	EventFirstMerge    = core.EventFirstMerge
	EventJobPlanned    = core.EventJobPlanned
	EventJobResumed    = core.EventJobResumed
	EventJobFinished   = core.EventJobFinished
	EventDeadLettered  = core.EventDeadLettered
	EventRepaired      = core.EventRepaired
	EventBackup        = core.EventBackup
	EventJobCodeFailed = core.EventJobCodeFailed
	EventJobWaiting    = core.EventJobWaiting
	EventJobRetried    = core.EventJobRetried
	EventJobDeleted    = core.EventJobDeleted
	EventTickFired     = core.EventTickFired
	EventTickSkipped   = core.EventTickSkipped
	EventTermEnded     = core.EventTermEnded
)
