package rig

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
)

// Extra starts worker id outside c's set with env after c's (see cluster.StartExtra), and tracks
// its pid. Stop it with its Stop method.
func (r *Rig) Extra(c *cluster.Cluster, id string, env ...string) (*cluster.Proc, error) {
	p, err := c.StartExtra(id, env...)
	if err != nil {
		return nil, err
	}
	r.TrackPID(p.PID, "worker "+id)
	return p, nil
}

// Link is a connection of a worker that a fault proxy can cut.
type Link int

// The links Proxied can cut.
const (
	NATSLink  Link = iota // the worker's NATS connection
	QueueLink             // its connection to the job queue
)

// Proxied starts extra worker id whose link goes through a fault proxy of its own, and waits
// until it announces itself. Close the proxy and stop the process when done.
func (r *Rig) Proxied(ctx context.Context, c *cluster.Cluster, id string, link Link) (*cluster.Proc, *faultproxy.Proxy, error) {
	var target string
	var env func(addr string) string
	switch link {
	case NATSLink:
		u, err := url.Parse(c.NATSURL)
		if err != nil {
			return nil, nil, err
		}
		target, env = u.Host, func(addr string) string { return "NATS_URL=nats://" + addr }
	case QueueLink:
		const key = "QueueEndpoint=http://"
		_, rest, ok := strings.Cut(c.ConnStr, key)
		if !ok {
			return nil, nil, fmt.Errorf("no queue endpoint in the connection string")
		}
		target, _, _ = strings.Cut(rest, "/")
		env = func(addr string) string {
			return "AZURE_STORAGE_CONNECTION_STRING=" + strings.Replace(c.ConnStr, key+target, key+addr, 1)
		}
	}
	px, err := faultproxy.New(target)
	if err != nil {
		return nil, nil, err
	}
	p, err := r.Extra(c, id, env(px.Addr()))
	if err == nil {
		if err = WaitMember(ctx, c, id, time.Minute); err != nil {
			p.Stop()
		}
	}
	if err != nil {
		_ = px.Close()
		return nil, nil, err
	}
	return p, px, nil
}

// WaitMember waits until worker id announces itself (its HTTP address is known).
func WaitMember(ctx context.Context, c *cluster.Cluster, id string, within time.Duration) error {
	until := time.Now().Add(within)
	for c.HTTPAddr(id) == "" {
		if time.Now().After(until) || ctx.Err() != nil {
			return fmt.Errorf("worker %s did not announce itself within %v", id, within)
		}
		_ = Sleep(ctx, 100*time.Millisecond)
	}
	return nil
}

// Readyz is the /readyz status of the worker at addr (0: no answer).
func Readyz(addr string) int {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// WaitReady waits up to within for the worker at addr to answer /readyz with want.
func WaitReady(ctx context.Context, addr string, want int, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within && ctx.Err() == nil {
		if Readyz(addr) == want {
			return time.Since(start), true
		}
		_ = Sleep(ctx, 100*time.Millisecond)
	}
	return time.Since(start), false
}

// SumMetric adds a counter over c's running workers' /metrics.
func SumMetric(c *cluster.Cluster, name string) float64 {
	var sum float64
	cl := http.Client{Timeout: 3 * time.Second}
	for _, id := range c.Running() {
		addr := c.HTTPAddr(id)
		if addr == "" {
			continue
		}
		resp, err := cl.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					sum += x
				}
			}
		}
	}
	return sum
}
