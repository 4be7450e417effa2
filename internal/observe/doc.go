// Package observe serves a worker's HTTP side: metrics, health, events and the dashboard.
//
// Metrics live in a registry of their own (Metrics). /healthz and /readyz (cached, time-bounded
// checks) serve probes. /api/events and /api/cluster carry the typed events. /api/jobs is the
// job view (read from storage at most once a second) and /api/schedules the schedules (every
// 2 s). / is the dashboard embedded in the binary. Every other path under /api/ goes to the job
// API (Backend.API, package api), which owns its writes and their rules.
//
// Guaranteed: none of its own routes changes state. Requests naming a Host the worker does not serve are refused
// (DNS rebinding), the job API's included. No CORS headers are sent. /readyz answers within the
// check timeout (2 s) even when storage or NATS hang. Errors shown over HTTP have URL query
// strings and account keys removed.
//
// Not guaranteed: reads are open to whoever reaches the port. The cluster event history is what
// this worker heard since it started; job progress samples are taken only while someone looks.
package observe
