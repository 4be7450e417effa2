// Command worker is the stock binary of the cluster: the built-in job types (package builtin) and
// the embeddable node. `worker run` joins the cluster: every process processes shards, and the one
// holding the blob lease also coordinates. The other subcommands submit and inspect jobs.
// `worker -h` lists them.
package main

import (
	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/node"
)

func main() { node.Main(node.Options{Registry: builtin.Registry()}) }
