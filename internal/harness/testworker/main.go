// Command testworker is the stock worker binary plus job types for tests and the load test.
//
// The bugs (package badjobs) are a panicking Merge, Split, Check or Result, and a Map that
// returns a permanent error. Tests and chaos run a cluster of it to prove that one bad job fails
// alone. The user jobs (package userjobs) are jobs written as a user writes them: csvsum, a
// keyed per-user sum over CSV rows, and slow-lines, a Map that reads its range for minutes.
package main

import (
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/internal/harness/testworker/userjobs"
	"github.com/mapagg/mapagg/node"
)

func main() {
	r := badjobs.Registry()
	if err := userjobs.Register(r); err != nil {
		panic(err) // distinct, valid names
	}
	node.Main(node.Options{Registry: r})
}
