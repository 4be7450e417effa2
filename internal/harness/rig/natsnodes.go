package rig

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// NATSNodes is a NATS cluster of nats-server processes (JetStream, routes between them). Each
// node keeps its ports and store, so a node killed with any signal restarts as itself.
type NATSNodes struct {
	Nodes []*devserver.NATSProcess
}

// StartNATSNodes starts n nodes named n0… under dir and waits until JetStream answers through
// every one of them. The rig tracks their pids.
//
// Its ports were free a moment before the nodes bind them; another process can take one in
// between (the node then exits, "address already in use"). The nodes then start again on fresh
// ports, up to three times.
func (r *Rig) StartNATSNodes(ctx context.Context, dir string, n int) (*NATSNodes, error) {
	bin, err := r.natsServer()
	if err != nil {
		return nil, err
	}
	var errs []error
	for try := range 3 {
		nn, err := r.startNATSNodes(ctx, bin, devserver.RetryDir(dir, try), n)
		if err == nil || ctx.Err() != nil {
			return nn, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (r *Rig) startNATSNodes(ctx context.Context, bin, dir string, n int) (*NATSNodes, error) {
	ports, err := devserver.FreePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("\"nats-route://127.0.0.1:%d\"", ports[n+i]))
	}
	nn := &NATSNodes{}
	for i := range n {
		conf := fmt.Sprintf("server_name: \"n%d\"\ncluster {\n  name: \"mapagg\"\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n",
			i, ports[n+i], strings.Join(routes, ", "))
		p := &devserver.NATSProcess{Bin: bin, Port: ports[i], Dir: filepath.Join(dir, fmt.Sprintf("n%d", i)), Conf: conf}
		nn.Nodes = append(nn.Nodes, p)
	}
	// The nodes wait for each other (a JetStream meta leader needs a quorum): start them together.
	errs := make(chan error, n)
	for _, p := range nn.Nodes {
		go func() {
			if err := os.MkdirAll(p.Dir, 0o755); err != nil {
				errs <- err
				return
			}
			errs <- p.Restart()
		}()
	}
	var all []error
	for range n {
		all = append(all, <-errs)
	}
	for i, p := range nn.Nodes {
		if pid := p.PID(); pid != 0 {
			r.TrackPID(pid, fmt.Sprintf("nats-server n%d", i))
		}
	}
	if err := errors.Join(all...); err != nil {
		nn.Stop()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := nn.waitJetStream(wctx); err != nil {
		nn.Stop()
		return nil, err
	}
	return nn, nil
}

// waitJetStream waits until JetStream's account info answers (a meta leader is elected).
func (nn *NATSNodes) waitJetStream(ctx context.Context) error {
	nc, err := nats.Connect(nn.URLs(), nats.Name("rig-nats-nodes"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	for {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := js.AccountInfo(actx)
		cancel()
		if err == nil {
			return nil
		}
		if Sleep(ctx, 100*time.Millisecond) != nil {
			return fmt.Errorf("nats nodes: no JetStream meta leader: %w", err)
		}
	}
}

// URL is node i's client URL.
func (nn *NATSNodes) URL(i int) string { return nn.Nodes[i].URL() }

// URLs lists every node's client URL, comma-separated.
func (nn *NATSNodes) URLs() string {
	var us []string
	for _, p := range nn.Nodes {
		us = append(us, p.URL())
	}
	return strings.Join(us, ",")
}

// Kill sends SIGKILL to node i and waits for it to exit.
func (nn *NATSNodes) Kill(i int) error { return nn.Nodes[i].Signal(syscall.SIGKILL) }

// Restart starts node i again as itself; the rig tracks its new pid.
func (nn *NATSNodes) Restart(r *Rig, i int) error {
	if err := nn.Nodes[i].Restart(); err != nil {
		return err
	}
	r.TrackPID(nn.Nodes[i].PID(), fmt.Sprintf("nats-server n%d", i))
	return nil
}

// Stop kills every node by pid.
func (nn *NATSNodes) Stop() {
	for _, p := range nn.Nodes {
		p.Stop()
	}
}

// StreamLeader names the node ("n0"…) that leads stream's Raft group, as JetStream reports it
// through any live node; "" when it has none now.
func StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	s, err := js.Stream(actx, stream)
	if err != nil {
		return "", err
	}
	info := s.CachedInfo()
	if info.Cluster == nil {
		return "", errors.New("stream info has no cluster section (not clustered)")
	}
	return info.Cluster.Leader, nil
}

// NodeIndex is the index of node name ("n2" → 2), -1 when it is not one.
func NodeIndex(name string) int {
	var i int
	if _, err := fmt.Sscanf(name, "n%d", &i); err != nil {
		return -1
	}
	return i
}

// WorkerIDs are the ids of a cluster's n workers: w1…wn.
func WorkerIDs(n int) []string {
	ids := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		ids = append(ids, fmt.Sprintf("w%d", i))
	}
	return ids
}

// SpreadNATS points worker wN at url((N−1) mod 3), as Spec.WorkerEnv.
func SpreadNATS(workers int, url func(i int) string) map[string][]string {
	env := map[string][]string{}
	for i, id := range WorkerIDs(workers) {
		env[id] = []string{"NATS_URL=" + url(i%3)}
	}
	return env
}

// Place points spec at the nodes: R3 streams, workers spread over the nodes.
func (nn *NATSNodes) Place(spec *Spec) {
	spec.NATSURL = nn.URLs()
	spec.Env = append(spec.Env, "STREAM_REPLICAS=3")
	spec.WorkerEnv = SpreadNATS(cmp.Or(spec.Workers, 3), nn.URL)
}

// JetStream connects a harness client, named name, to every node; it reconnects for ever.
func (nn *NATSNodes) JetStream(name string) (jetstream.JetStream, error) {
	nc, err := nats.Connect(nn.URLs(), nats.Name(name), nats.MaxReconnects(-1))
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return js, nil
}

// LeaderNode names the node that leads stream and gives its index.
func (nn *NATSNodes) LeaderNode(ctx context.Context, js jetstream.JetStream, stream string) (string, int, error) {
	name, err := StreamLeader(ctx, js, stream)
	if err != nil {
		return "", -1, fmt.Errorf("find the leader of %s: %w", stream, err)
	}
	i := NodeIndex(name)
	if i < 0 || i >= len(nn.Nodes) {
		return name, -1, fmt.Errorf("%s is led by %q, not a node of this cluster", stream, name)
	}
	return name, i, nil
}

// WaitNewLeader polls until stream is led by a node other than old, for at most within. It
// returns the time from since, or 0 and the last error when none was seen.
func WaitNewLeader(ctx context.Context, js jetstream.JetStream, stream, old string, since time.Time, within time.Duration) (time.Duration, error) {
	var lastErr error
	for time.Since(since) < within && ctx.Err() == nil {
		l, err := StreamLeader(ctx, js, stream)
		if err == nil && l != "" && l != old {
			return time.Since(since), nil
		}
		lastErr = err
		_ = Sleep(ctx, 20*time.Millisecond)
	}
	return 0, lastErr
}
