// Package api is the job control HTTP API: /api/v1 and the dashboard's actions.
//
// It serves submit, list, detail, result, output, cancel, delete and retry of jobs, the
// schedules, and /api/v1/openapi.json, which lists exactly these routes. The dashboard's cancel,
// retry and delete (POST /api/jobs/{id}/...) are here too, under their own rules. Its services
// are *client.Client, so a job is validated once, by client.Submit, as from the CLI.
//
// Guaranteed: every write needs the bearer token of Config.Token, compared in constant time;
// without a token writes are refused. The dashboard's actions take the token or, with
// Config.DashboardCancel, a same-origin request (against CSRF). Bodies are bounded (MaxBody),
// decoded strictly and never echoed; ids and schedule names are checked before any call. A refused
// job or schedule is a 400 naming the field at fault and writes nothing. A job's detail is
// metadata only; errors shown have URL query strings and account keys removed. Each request's calls are bounded to 30 s, an output
// stream to MaxOutputStream, and a stream that fails after its first byte is cut, never short.
//
// Not guaranteed: reads are open to whoever reaches the port. The Host check (DNS rebinding)
// and the listener are package observe's, which mounts this handler.
package api
