// Package observe makes a worker visible: Prometheus metrics in a registry of its own (Metrics),
// the liveness and readiness endpoints (/healthz, /readyz with cached, time-bounded checks), the
// events API (this worker's typed election and coordinator events at /api/events, the cluster's
// at /api/cluster), the job view (/api/jobs, read from storage at most once a second however
// many pages are open) and the dashboard at /, one static page embedded in the binary.
//
// Guaranteed: every endpoint but the dashboard's cancel button is read-only, and that button
// works only when the worker was started with --dashboard-cancel; /readyz answers within the
// check timeout (2 s) even when storage or NATS hang; errors shown over HTTP have URL query
// strings and account keys removed. Not guaranteed: the cluster event history is what this
// worker heard on core NATS since it started (at most once; a page served by a newer worker
// shows less), and job progress samples are taken only while someone looks.
package observe
