// Package deploy holds the deployment examples (kubernetes/) and the tests that hold them true.
//
// The Kubernetes manifests are checked against the flags and environment the worker reads. The
// production topology of docs/deploy.md runs for real: workers with least-privilege NATS
// permissions, and a 3-node NATS cluster with R3 streams that loses a node mid-job.
//
// It has no code of its own; everything is in its tests.
package deploy
