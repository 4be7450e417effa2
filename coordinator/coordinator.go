// Package coordinator is the face of the leader's work: its configuration, its constructor and
// the typed events it reports. The engine (intake, plan, dispatch, merge, checkpoint, schedules,
// retention) lives in internal/coordinator; see its package documentation for the guarantees.
package coordinator

import (
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/jobs"
)

type (
	// Config is the coordinator's configuration; DefaultConfig documents every default.
	Config = coordinator.Config
	// Coordinator is the leader-only work of one process; each term is one call to Lead.
	Coordinator = coordinator.Coordinator
	// Event is one transition the coordinator reports through Config.OnEvent.
	Event = coordinator.Event
)

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config { return coordinator.DefaultConfig() }

// New returns a coordinator over the jobs container, the intake queue and the bus.
func New(cfg Config, st coordinator.Store, q coordinator.Queue, b coordinator.Bus, env jobs.Env) (*Coordinator, error) {
	return coordinator.New(cfg, st, q, b, env)
}
