package budget_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/sim"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/node"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// cluster is members of one host (package sim: real nodes, each with a counting storage
// client) and a submitter whose storage client counts too.
type cluster struct {
	names   sim.Names
	host    *sim.Host
	client  *client.Client
	submits *storecount.Counting
	blob    *azblob.Client // the submitter's blob client (its requests count as submits)
	bus     *bus.Bus

	mu     sync.Mutex
	events []membership.Event
}

// newCluster starts members on a NATS server of its own. The cluster lives as long as t, or
// as long as the test binary when t is nil (package-level: shared by tests).
func newCluster(t *testing.T, members int, shared bool) *cluster {
	t.Helper()
	ctx := context.Background()
	cleanup := t.Cleanup
	if shared {
		cleanup = func(func()) {} // the process's end stops it; testenv.Main stops Azurite
	}
	ns := testenv.Name(t, "budget")
	dir, err := os.MkdirTemp("", "budget-nats-")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := devserver.StartNATS(dir)
	if err != nil {
		t.Fatal(err)
	}
	cleanup(func() { srv.Shutdown(); srv.WaitForShutdown(); _ = os.RemoveAll(dir) })
	conn, natsURL := testenv.Azurite(t), srv.ClientURL()
	var secret [32]byte
	_, _ = rand.Read(secret[:])
	keys, err := node.ParseClusterKeys(base64.StdEncoding.EncodeToString(secret[:]))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{names: sim.NamesFor(ns), submits: storecount.NewCounting(nil)}
	if c.host, err = sim.NewHost(sim.MemberConfig{ConnStr: conn, NATSURL: natsURL, Names: c.names, Keys: keys}); err != nil {
		t.Fatal(err)
	}
	cleanup(c.host.Close)
	clients, err := store.Account{ConnectionString: conn, Transport: c.submits}.Open()
	if err != nil {
		t.Fatal(err)
	}
	c.blob = clients.Blob
	jobsC := store.New(clients.Blob, c.names.JobsContainer)
	q, err := queue.Open(clients, c.names.Queue)
	if err != nil {
		t.Fatal(err)
	}
	if c.bus, err = bus.Connect(natsURL, "budget", bus.Config{Prefix: c.names.StreamPrefix}); err != nil {
		t.Fatal(err)
	}
	cleanup(c.bus.Close)
	c.client = &client.Client{Store: jobsC, Queue: q, Notify: c.bus, Registry: builtin.Registry(), InlineSpec: true}
	if _, err := c.bus.Conn().Subscribe(protocol.NewNames(c.names.StreamPrefix).Events(), func(m *nats.Msg) {
		if e, err := membership.DecodeEvent(m.Data); err == nil {
			c.mu.Lock()
			c.events = append(c.events, *e)
			c.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.bus.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range members {
		if err := c.host.Start(sim.MemberID(i)); err != nil {
			t.Fatal(err)
		}
	}
	c.wait(t, 60*time.Second, "a leader", func(e membership.Event) bool { return e.Kind == string(election.EventElected) })
	_ = ctx
	return c
}

// wait waits for an event that ok accepts and returns it.
func (c *cluster) wait(t *testing.T, within time.Duration, what string, ok func(membership.Event) bool) membership.Event {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		c.mu.Lock()
		for _, e := range c.events {
			if ok(e) {
				c.mu.Unlock()
				return e
			}
		}
		c.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("no event of %s within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// backups is how many backup copies of job's tasks the leaders published (EventBackup's counts).
func (c *cluster) backups(job string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.events {
		if e.Kind == string(coordinator.EventBackup) && e.Job == job {
			n += e.Count
		}
	}
	return n
}

// tiny submits a one-shard sleep job and waits until it finished.
func (c *cluster) tiny(ctx context.Context, t *testing.T) string {
	t.Helper()
	j := knownjobs.Sleep(1, "")
	id, err := c.client.Submit(ctx, j.Type, j.Params)
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, 30*time.Second, "job "+id+" finished", func(e membership.Event) bool {
		return e.Kind == string(coordinator.EventJobFinished) && e.Job == id
	})
	return id
}

// naming keeps the requests whose blob names the job.
func naming(id string) func(storecount.Request) bool {
	return func(r storecount.Request) bool { return strings.Contains(r.Blob, id) }
}

// leader is the member elected last.
func (c *cluster) leader(t *testing.T) membership.Event {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var best membership.Event
	for _, e := range c.events {
		if e.Kind == string(election.EventElected) && e.Epoch > best.Epoch {
			best = e
		}
	}
	if best.Worker == "" {
		t.Fatal("no leader")
	}
	return best
}
