// Command testworker is the stock worker binary plus job types with deliberate bugs.
//
// The bugs (package badjobs) are a panicking Merge, Split, Check or Result, and a Map that
// returns a permanent error. Tests and chaos run a cluster of it to prove that one bad job fails alone.
package main

import (
	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
	"github.com/mapagg/mapagg/node"
)

func main() { node.Main(node.Options{Registry: badjobs.Registry()}) }
