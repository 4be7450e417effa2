// Package telemetry traces a job's path through the cluster with OpenTelemetry.
//
// A job is one trace. Its trace id and the span id of its "job" span are derived from the job
// id, so every process (the submitting client, each leader that held the job, every worker that
// ran a task) joins the same trace knowing only the id: no field is added to the job spec or to
// the shard messages, and members of earlier builds still read both. The spans are submit,
// intake, plan, the map, reduce and shard tasks on the workers that ran them, merge batches,
// checkpoint and finish; the leader that finishes the job emits the "job" span itself, from its
// submission to its end, as the parent of all of them.
//
// Tracing is on when an OTLP/HTTP endpoint is configured (Config.Endpoint, or the standard
// OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT variables) and off
// otherwise. A node carries its *Tracing in the context it hands to the coordinator and the
// worker (NewContext); without one, Start returns a span that does nothing and costs one context
// lookup.
//
// What is guaranteed: spans carry job ids, types, shard indexes, attempts, epochs, worker ids
// and outcomes, never a job's parameters, a token or a connection string. What is not: spans
// are exported in batches and may be lost when a process dies or the collector is down; a job
// finished twice (a leader deposed during its end) has two "job" spans with one id.
package telemetry
