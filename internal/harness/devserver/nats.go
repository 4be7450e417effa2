package devserver

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// natsOptions are the settings of every NATS server the harness starts: 127.0.0.1, JetStream,
// the store in storeDir, 8 MiB payloads.
func natsOptions(port int, storeDir string) *server.Options {
	return &server.Options{
		Host:               "127.0.0.1",
		Port:               port,
		JetStream:          true,
		StoreDir:           storeDir,
		NoLog:              true,
		NoSigs:             true,
		MaxPayload:         8 << 20,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  4 << 30,
	}
}

// StartNATS starts an in-process NATS server with JetStream on a free 127.0.0.1 port.
// The caller owns it and must Shutdown it.
func StartNATS(storeDir string) (*server.Server, error) {
	return startServer(natsOptions(-1, storeDir))
}

func startServer(o *server.Options) (*server.Server, error) {
	s, err := server.NewServer(o)
	if err != nil {
		return nil, err
	}
	go s.Start()
	if !s.ReadyForConnections(natsReadyWithin) {
		s.Shutdown()
		return nil, fmt.Errorf("nats server on port %d not ready within %v (a port taken?)", o.Port, natsReadyWithin)
	}
	return s, nil
}

// FreePorts returns n distinct TCP ports on 127.0.0.1 that were free a moment ago.
func FreePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are chosen, so none is chosen twice
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// NATSCluster is n in-process NATS servers with JetStream routed into one cluster.
// Each node has its own store and fixed ports, so a stopped node restarts as itself.
type NATSCluster struct {
	opts  []*server.Options
	mu    sync.Mutex
	nodes []*server.Server
}

// StartNATSCluster starts n nodes storing under dir (one node is a plain server) and waits for a
// JetStream meta leader. users, when set, are the accounts every node accepts.
//
// Its ports were free a moment before the nodes bind them; another process can take one in
// between, and a node that cannot listen never becomes ready. The cluster then starts again on
// fresh ports, up to three times.
func StartNATSCluster(dir string, n int, users []*server.User) (*NATSCluster, error) {
	var errs []error
	for try := range 3 {
		c, err := startNATSCluster(RetryDir(dir, try), n, users)
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func startNATSCluster(dir string, n int, users []*server.User) (*NATSCluster, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", ports[n+i]))
	}
	c := &NATSCluster{nodes: make([]*server.Server, n)}
	for i := range n {
		o := natsOptions(ports[i], filepath.Join(dir, fmt.Sprintf("n%d", i)))
		o.ServerName, o.Users = fmt.Sprintf("n%d", i), users
		if n > 1 {
			o.Cluster = server.ClusterOpts{Name: "mapagg", Host: "127.0.0.1", Port: ports[n+i]}
			o.Routes = server.RoutesFromStr(strings.Join(routes, ","))
		}
		c.opts = append(c.opts, o)
	}
	for i := range n {
		if err := c.Start(i); err != nil {
			c.Stop()
			return nil, err
		}
	}
	for deadline := time.Now().Add(60 * time.Second); n > 1 && !c.hasMetaLeader(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			c.Stop()
			return nil, errors.New("nats cluster: no JetStream meta leader within 60s")
		}
	}
	return c, nil
}

func (c *NATSCluster) hasMetaLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.nodes {
		if s != nil && s.JetStreamIsLeader() {
			return true
		}
	}
	return false
}

// Start starts node i (again) on its ports and store.
func (c *NATSCluster) Start(i int) error {
	o := *c.opts[i]
	s, err := startServer(&o)
	if err != nil {
		return fmt.Errorf("nats node %d: %w", i, err)
	}
	c.mu.Lock()
	c.nodes[i] = s
	c.mu.Unlock()
	return nil
}

// StopNode shuts node i down and waits for it.
func (c *NATSCluster) StopNode(i int) {
	c.mu.Lock()
	s := c.nodes[i]
	c.nodes[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// Stop shuts every node down.
func (c *NATSCluster) Stop() {
	for i := range c.nodes {
		c.StopNode(i)
	}
}

// URL is node i's client URL.
func (c *NATSCluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port) }

// URLs lists every node's client URL, comma-separated (a NATS_URL that reaches any of them).
func (c *NATSCluster) URLs() string {
	var us []string
	for i := range c.opts {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

// RetryDir is the store directory of a cluster's start attempt try: dir first, then a fresh one
// beside it, so no node meets the state a failed attempt left.
func RetryDir(dir string, try int) string {
	if try == 0 {
		return dir
	}
	return fmt.Sprintf("%s-retry%d", dir, try)
}

// freePorts is FreePorts and natsReadyWithin how long an in-process server may take to listen; a
// test replaces them to hand out a port another program holds and to give up on it sooner.
var (
	freePorts       = FreePorts
	natsReadyWithin = 20 * time.Second
)
