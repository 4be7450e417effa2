// Package worker is the face of the work every process does: its configuration and constructor.
// The engine (shard consumption, map and reduce tasks, result publishing) lives in
// internal/worker; see its package documentation for the guarantees.
package worker

import (
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

type (
	// Config is the worker's configuration; DefaultConfig documents every default.
	Config = worker.Config
	// Worker consumes shards, runs map and reduce tasks and publishes results.
	Worker = worker.Worker
)

// DefaultConfig returns the defaults of every setting.
func DefaultConfig() Config { return worker.DefaultConfig() }

// New returns a worker over the bus; partials is where large partials and shuffle runs go.
func New(cfg Config, b worker.Bus, partials worker.PartialStore, env jobs.Env) (*Worker, error) {
	return worker.New(cfg, b, partials, env)
}
