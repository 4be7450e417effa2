// Package observe serves a worker's HTTP side: metrics, health, the job API and the dashboard.
//
// Metrics live in a registry of their own (Metrics). /healthz and /readyz (cached, time-bounded
// checks) serve probes. /api/events and /api/cluster carry the typed events. /api/jobs is the
// job view (read from storage at most once a second) and /api/schedules the schedules (every
// 2 s). /api/v1 is the versioned job and schedule API described by /api/v1/openapi.json, and /
// the dashboard embedded in the binary.
//
// Guaranteed: every write (jobs, schedules) needs the bearer token of Config.APIToken, compared
// in constant time, or, for the dashboard's cancel, retry and delete, --dashboard-cancel and a
// same-origin request; without a token writes are refused. A job's detail is metadata only. Requests naming a Host the worker does not serve
// are refused (DNS rebinding). No CORS headers are sent. Bodies and ids are bounded. /readyz
// answers within the check timeout (2 s) even when storage or NATS hang. Errors shown over HTTP
// have URL query strings and account keys removed.
//
// Not guaranteed: reads are open to whoever reaches the port. The cluster event history is what
// this worker heard since it started; job progress samples are taken only while someone looks.
package observe
