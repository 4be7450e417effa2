package rig

import (
	"context"
	"fmt"
	"net/url"
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
	default:
		return nil, nil, fmt.Errorf("link %d: not one of NATSLink, QueueLink", link)
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
