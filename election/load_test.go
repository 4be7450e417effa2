package election_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
)

// Three electors at default settings with heartbeats over a real NATS server, in one process
// whose cores are all saturated by busy goroutines (2 per core, like map work next to the
// coordinator), for ELECTION_LOAD (e.g. 3m): no live leader may be deposed. It reports how late
// heartbeats arrived (gap between consecutive beats minus the interval; one-way delay).
// Slow and CPU-hungry, so it runs only when asked:
//
//	ELECTION_LOAD=3m go test -race -run NoFalseTakeoversUnderCPULoad -v ./election/
//	ELECTION_LOAD=3m ELECTION_LOAD_NATS=nats://127.0.0.1:4350 go test -run … (an own nats-server)
func TestElector_NoFalseTakeoversUnderCPULoad(t *testing.T) {
	d, err := time.ParseDuration(os.Getenv("ELECTION_LOAD"))
	if err != nil || d <= 0 {
		t.Skip("set ELECTION_LOAD=3m to run the loaded no-fault run")
	}
	url := os.Getenv("ELECTION_LOAD_NATS") // a nats-server process of its own, as in production
	if url == "" {
		url = testenv.NATS(t) // in this process: it competes with the burners for the CPU
	}
	client, err := azblob.NewClientFromConnectionString(testenv.Azurite(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	container := testenv.Name(t, "load")
	def := election.DefaultConfig()

	var elected, suspected, broke, gone atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range 3 {
		b, err := bus.Connect(url, fmt.Sprintf("load-%d", i), keyed())
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		cfg := def
		cfg.Identity, cfg.Container, cfg.Heartbeats = fmt.Sprintf("load-%d", i), container, b.Heartbeats()
		cfg.Prober = b.TermProber() // as a worker runs: the fast path and its watcher on
		cfg.Successors = func() []string { return []string{"load-0", "load-1", "load-2"} }
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.OnEvent = func(ev election.Event) {
			switch ev.Kind {
			case election.EventElected:
				elected.Add(1)
			case election.EventSuspected:
				suspected.Add(1)
			case election.EventBrokeLease:
				broke.Add(1)
			case election.EventNoResponders:
				gone.Add(1)
			}
		}
		e, err := election.NewAzure(client, cfg)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = e.Run(ctx, func(lctx context.Context) error { <-lctx.Done(); return nil })
		}()
	}

	// An observer on its own connection records every beat.
	ob, err := bus.Connect(url, "observer", keyed())
	if err != nil {
		t.Fatal(err)
	}
	defer ob.Close()
	var mu sync.Mutex
	var gaps, delays []time.Duration
	var last time.Time
	var lastEpoch uint64
	stop, err := ob.Heartbeats().Subscribe(func(b election.Beat) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		delays = append(delays, now.Sub(b.Sent))
		if b.Epoch == lastEpoch {
			gaps = append(gaps, now.Sub(last)-def.HeartbeatInterval)
		}
		last, lastEpoch = now, b.Epoch
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	testenv.Eventually(t, 10*time.Second, 10*time.Millisecond, func() bool { return elected.Load() == 1 }, "no leader")

	var burn atomic.Bool
	burn.Store(true)
	var burners sync.WaitGroup
	for range 2 * runtime.NumCPU() {
		burners.Add(1)
		go func() {
			defer burners.Done()
			x := 0
			for burn.Load() {
				for i := range 1 << 16 {
					x += i * i
				}
			}
			_ = x
		}()
	}
	time.Sleep(d)
	burn.Store(false)
	burners.Wait()

	mu.Lock()
	defer mu.Unlock()
	p := func(xs []time.Duration, q float64) time.Duration {
		if len(xs) == 0 {
			return 0
		}
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	t.Logf("%v loaded, %d cores busy ×2: %d beats; lateness (gap−interval) p50 %v p99 %v max %v; one-way delay p50 %v p99 %v max %v",
		d, runtime.NumCPU(), len(delays), p(gaps, .5), p(gaps, .99), p(gaps, 1), p(delays, .5), p(delays, .99), p(delays, 1))
	t.Logf("terms %d, suspicions %d, no responders %d, breaks %d (interval %v, suspicion timeout %v)",
		elected.Load(), suspected.Load(), gone.Load(), broke.Load(), def.HeartbeatInterval, def.SuspicionTimeout)
	if n := elected.Load(); n != 1 || broke.Load() != 0 {
		t.Errorf("%d terms and %d breaks in a fault-free run: a live leader was deposed", n, broke.Load())
	}
}

// keyed is the bus configuration of a cluster member (heartbeats carry the cluster key's MAC).
func keyed() bus.Config {
	c := bus.DefaultConfig()
	c.Keys = testkeys.Keys()
	return c
}
