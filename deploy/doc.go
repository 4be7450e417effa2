// Package deploy holds the deployment examples (kubernetes/) and the tests that hold them to the
// binary: the Kubernetes manifests are parsed and checked against the flags and environment the
// worker reads, and the production topology the guide (docs/deploy.md) recommends is run for real:
// workers with least-privilege NATS permissions, and a 3-node NATS cluster with R3 streams that
// loses a node mid-job.
//
// It has no code of its own; everything is in its tests.
package deploy
