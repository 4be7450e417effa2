// Package report holds the load test's and the fault matrix's reports: their JSON, targets,
// Markdown and plots.
//
// Load and Matrix are what cmd/loadtest and cmd/chaos write. A scenario fills its section; the
// commands keep only the sections of scenarios that live beside them.
package report
