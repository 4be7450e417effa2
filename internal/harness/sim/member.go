package sim

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"

	"github.com/mapagg/mapagg/node"
	"github.com/mapagg/mapagg/store"
)

// Names are a simulated cluster's container, queue and stream names.
type Names struct {
	JobsContainer, Queue, LeaseContainer, StreamPrefix string
}

// NamesFor are the names of namespace ns, as the load test's clusters spell them.
func NamesFor(ns string) Names {
	return Names{JobsContainer: ns + "-jobs", Queue: ns + "-jobs", LeaseContainer: ns + "-leader", StreamPrefix: strings.ReplaceAll(ns, "-", "")}
}

// MemberConfig is what every member of a host shares.
type MemberConfig struct {
	ConnStr       string // the storage account (Azurite's connection string)
	NATSURL       string // nats://host:port of the one server
	Names         Names
	LeaseDuration time.Duration     // default 15s
	Concurrency   int               // shards at once per member; default 2
	Keys          *node.ClusterKeys // the cluster key; required (members never read it from storage)
	Logger        *slog.Logger      // default: warnings and errors to stderr
}

// ErrCrashed is what a crashed member's storage requests fail with.
var ErrCrashed = errors.New("sim: member crashed")

// cutTransport fails every request once cut, as a dead process sends none.
type cutTransport struct {
	next policy.Transporter
	cut  atomic.Bool
}

func (t *cutTransport) Do(req *http.Request) (*http.Response, error) {
	if t.cut.Load() {
		return nil, ErrCrashed
	}
	return t.next.Do(req)
}

// member is one running node.
type member struct {
	id       string
	link     *link
	storage  *cutTransport
	counting *storecount.Counting
	cancel   context.CancelFunc
	done     chan struct{}
	err      error
}

// startMember starts node.Serve for id with a NATS link and a storage client of its own.
func startMember(n *node.Node, cfg MemberConfig, id string) (*member, error) {
	u, err := url.Parse(cfg.NATSURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("sim: NATS URL %q: want nats://host:port", cfg.NATSURL)
	}
	l := newLink(u.Host)
	// An HTTP pool of its own, set as the production pools are (store.Transport).
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 128
	counting := storecount.NewCounting(&http.Client{Transport: t})
	m := &member{id: id, link: l, storage: &cutTransport{next: counting}, counting: counting, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	ncfg := node.Config{
		Storage: store.Account{ConnectionString: cfg.ConnStr, Transport: m.storage},
		NATSURL: l.URL(), NATSDialer: l, JobsContainer: cfg.Names.JobsContainer, Queue: cfg.Names.Queue,
		LeaseContainer: cfg.Names.LeaseContainer, StreamPrefix: cfg.Names.StreamPrefix,
		ID: id, LeaseDuration: cfg.LeaseDuration, Concurrency: cfg.Concurrency, HTTPAddr: "off",
		ClusterKeys: cfg.Keys, Logger: cfg.Logger.With("member", id),
	}
	go func() {
		defer close(m.done)
		defer t.CloseIdleConnections()
		m.err = n.Serve(ctx, ncfg)
	}()
	return m, nil
}

// crash makes the member look dead from outside at once and then stops it; it returns when
// the crash began. The member's goroutines end later (wait).
func (m *member) crash() time.Time {
	at := time.Now()
	m.storage.cut.Store(true)
	m.link.Cut()
	m.cancel()
	return at
}

// stop ends the member gracefully: a leader releases its lease and says so.
func (m *member) stop() { m.cancel(); m.wait(30 * time.Second); m.link.Cut() }

// wait waits at most within for the member's node to return.
func (m *member) wait(within time.Duration) bool {
	select {
	case <-m.done:
		return true
	case <-time.After(within):
		return false
	}
}
