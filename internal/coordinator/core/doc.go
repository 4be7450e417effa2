// Package core holds what the coordinator's components share: config, ports, events, errors.
//
// The ports (Store, Queue, Bus, Metrics) are what the coordinator needs of storage, the queue and
// the bus. Isolate runs a job type's code on the leader, turning a panic or a job-failing error
// into a *UserCodeError. The coordinator package names the exported types here by alias.
package core
