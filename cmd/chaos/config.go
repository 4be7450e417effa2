package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
)

// Config configures a run; DefaultConfig holds the defaults.
type Config struct {
	Dir       string   // the servers' data and the worker logs; required
	WorkerBin string   // a prebuilt worker binary; "": built into Dir
	NATSBin   string   // the nats-server binary; "": bin/nats-server, built when absent
	Faults    []string // by name (see faultNames); empty runs them all
	Quick     bool     // a smaller job
	Workers   int      // per cluster
	// Shards of ShardDelay make the sleep job; PrimesShards of primes below 10⁷ make the primes
	// job, each slowed by ShardDelay. Without the delay it ends before a fault can hit it.
	Shards       int
	ShardDelay   time.Duration
	PrimesShards int
	At           float64       // the fraction of shards merged at which a fault is injected
	Deadline     time.Duration // a job not ended this long after its fault is healed is stuck
	// CancelWithin: a job cancelled during a failover must end this long after the new leader's
	// election at the latest (issue 10: cancel is checked at claim).
	CancelWithin  time.Duration
	LeaseDuration time.Duration // of the election (15s is the Azure minimum)
	ShardTimeout  time.Duration // of the workers
}

// DefaultConfig is the full matrix.
func DefaultConfig() Config {
	return Config{Workers: 3, Shards: 400, ShardDelay: 100 * time.Millisecond, PrimesShards: 200, At: 0.3,
		Deadline: 60 * time.Second, CancelWithin: time.Second, LeaseDuration: 15 * time.Second, ShardTimeout: 5 * time.Second}
}

// QuickConfig is the quick run: a smaller sleep job, the cheap faults.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Quick = true
	// 200 × 100 ms: about 4 s on 3 workers, long enough to be struck on a busy 2-core box (at 50 ms a
	// loaded CI run saw jobs end before their fault).
	c.Shards, c.ShardDelay = 200, 100*time.Millisecond
	c.Faults = quickFaults
	return c
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: required"))
	}
	for _, f := range c.Faults {
		if !slices.Contains(faultNames(), f) {
			errs = append(errs, fmt.Errorf("fault %q: unknown; the faults are %s", f, strings.Join(faultNames(), ", ")))
		}
	}
	if c.Workers < 2 {
		errs = append(errs, fmt.Errorf("workers %d: at least 2 (a leader and one to take over)", c.Workers))
	}
	if c.Shards < 20 || c.Shards > 100_000 {
		errs = append(errs, fmt.Errorf("shards %d: between 20 and 100000", c.Shards))
	}
	if c.ShardDelay <= 0 {
		errs = append(errs, fmt.Errorf("shard delay %v: must be positive, or a job ends before the fault", c.ShardDelay))
	}
	if c.PrimesShards < 4 {
		errs = append(errs, fmt.Errorf("primes shards %d: at least 4", c.PrimesShards))
	}
	if !(c.At > 0 && c.At < 0.9) {
		errs = append(errs, fmt.Errorf("at %v: between 0 and 0.9 (the fraction merged when the fault hits)", c.At))
	}
	if c.Deadline < 10*time.Second {
		errs = append(errs, fmt.Errorf("deadline %v: at least 10s", c.Deadline))
	}
	if c.CancelWithin <= 0 {
		errs = append(errs, fmt.Errorf("cancel-within %v: must be positive", c.CancelWithin))
	}
	if c.LeaseDuration < 15*time.Second || c.LeaseDuration > 60*time.Second {
		errs = append(errs, fmt.Errorf("lease %v: Azure allows 15s to 60s", c.LeaseDuration))
	}
	if c.ShardTimeout < time.Second {
		errs = append(errs, fmt.Errorf("shard timeout %v: at least 1s", c.ShardTimeout))
	}
	return errors.Join(errs...)
}

func (c Config) sleepJob() knownjobs.Job { return knownjobs.Sleep(c.Shards, c.ShardDelay.String()) }

// mapDelay is the workers' map delay for j: ShardDelay for primes, none for sleep (it sleeps).
func (c Config) mapDelay(j knownjobs.Job) time.Duration {
	if j.Type == "primes" || j.Type == "wordcount" { // wordcount: the keyed faults' job (keyed.go)
		return c.ShardDelay
	}
	return 0
}

func (c Config) primesJob() knownjobs.Job { return knownjobs.Primes(10_000_000, c.PrimesShards) }
