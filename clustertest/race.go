//go:build race

package clustertest

// raceEnabled: the test runs with the race detector, so the workers are built with it too.
const raceEnabled = true
