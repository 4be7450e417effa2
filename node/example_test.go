package node_test

import (
	"context"
	"fmt"
	"os"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/node"
)

// A custom binary is main, its registry, and one call. It has every command of the stock worker:
// `mybin run` joins the cluster with the built-ins and your job types, and the stock `worker
// submit` can submit your types to it (the running workers validate them).
func Example() {
	reg := builtin.Registry() // or jobs.NewRegistry() for your types only
	// reg.Register(MyJob{})  // your job types
	node.Main(node.Options{Registry: reg, Name: "mybin"})
}

// Node.Run is the whole command line as a function: args, writers, and an exit status. A job is
// validated before anything is written: with NATS off, a type the binary has is validated here,
// so this needs no server (storage is named, never reached).
func ExampleNode_Run() {
	n, err := node.New(node.Options{Registry: builtin.Registry(), Name: "mybin"})
	if err != nil {
		fmt.Println(err)
		return
	}
	storage := "--azure-connection-string=AccountName=example;AccountKey=ZXhhbXBsZQ==;BlobEndpoint=http://127.0.0.1:1/example;QueueEndpoint=http://127.0.0.1:1/example"
	code := n.Run(context.Background(), []string{"submit", storage, "--nats-url", "off", "--type", "primes", "--params", `{"from":0,"to":10,"shards":0}`}, os.Stdout, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// mybin submit: bad parameters for primes: "shards" must be at least 1 (got 0)
	// exit status 2
}

// Serve runs a node from a Config built in code rather than from flags and environment.
func ExampleNode_Serve() {
	n, err := node.New(node.Options{Registry: builtin.Registry()})
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := node.DefaultConfig()
	cfg.Storage.ConnectionString = os.Getenv("AZURE_STORAGE_CONNECTION_STRING")
	cfg.NATSURL = "nats://127.0.0.1:4222"
	cfg.ID = "worker-1"
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := n.Serve(ctx, cfg); err != nil { // until ctx ends
		fmt.Println(err)
	}
}
