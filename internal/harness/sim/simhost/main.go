// Command simhost runs simulated cluster members in one process (package sim): the load test's
// thousand scenario starts several and drives them over stdin and stdout.
//
// Settings come from the environment: SIM_STORAGE (a storage connection string), SIM_NATS_URL,
// SIM_NAMESPACE, SIM_LEASE_DURATION, SIM_CLUSTER_KEY (the cluster key, base64). Commands are
// read from stdin, one a line (sim.Host.Serve); logs go to stderr.
package main

import (
	"fmt"
	"os"
	"time"

	"github.com/mapagg/mapagg/internal/harness/sim"
	"github.com/mapagg/mapagg/node"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "simhost:", err)
		os.Exit(1)
	}
}

func run() error {
	sim.RaiseFileLimit()
	keys, err := node.ParseClusterKeys(os.Getenv("SIM_CLUSTER_KEY"))
	if err != nil {
		return fmt.Errorf("SIM_CLUSTER_KEY: %w", err)
	}
	lease, err := time.ParseDuration(os.Getenv("SIM_LEASE_DURATION"))
	if err != nil {
		return fmt.Errorf("SIM_LEASE_DURATION: %w", err)
	}
	h, err := sim.NewHost(sim.MemberConfig{ConnStr: os.Getenv("SIM_STORAGE"), NATSURL: os.Getenv("SIM_NATS_URL"),
		Names: sim.NamesFor(os.Getenv("SIM_NAMESPACE")), LeaseDuration: lease, Keys: keys})
	if err != nil {
		return err
	}
	return h.Serve(os.Stdin, os.Stdout)
}
