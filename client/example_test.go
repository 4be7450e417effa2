package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/store"
)

// A program submits a job, waits for it and prints its result. The settings are the CLI's:
// AZURE_STORAGE_CONNECTION_STRING and NATS_URL here. Types the program has (builtin.Registry())
// are validated locally; any other is validated by the running workers.
func ExampleNew() {
	ctx := context.Background()
	cfg := client.DefaultConfig()
	cfg.Storage = store.Account{ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING")}
	cfg.NATSURL = os.Getenv("NATS_URL")
	cfg.Registry = builtin.Registry()
	cl, err := client.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()

	id, err := cl.Submit(ctx, "primes", json.RawMessage(`{"from":0,"to":1000000,"shards":10}`))
	if err != nil {
		log.Fatal(err) // a bad type or parameters: nothing was written
	}
	st, err := cl.Wait(ctx, id, 250*time.Millisecond, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := cl.Result(ctx, id)
	if err != nil {
		log.Fatalf("job %s %s: %v", id, st.State, err)
	}
	fmt.Printf("%s\n", res)
}
