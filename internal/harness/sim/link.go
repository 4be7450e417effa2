package sim

import (
	"errors"
	"net"
	"sync"
	"time"
)

// link is one member's way to NATS: the dialer of its NATS connections (node.Config.NATSDialer),
// which keeps every socket it opened so that Cut can close them as a process's death would.
//
// It was a forwarder (a listener and two copying goroutines a connection): every NATS message
// of every member crossed the host twice more, an eighth of an idle host's CPU at 100 members.
// A socket closed by the client is what the server sees of a dead process either way.
type link struct {
	target string

	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

// errCut: the member crashed; it dials nothing more.
var errCut = errors.New("sim: member crashed")

// newLink returns the link of a member to the NATS server at target (host:port).
func newLink(target string) *link { return &link{target: target} }

// URL is the NATS URL the member connects to (through Dial).
func (l *link) URL() string { return "nats://" + l.target }

// Dial opens a connection to NATS (nats.CustomDialer), unless the member crashed.
func (l *link) Dial(network, address string) (net.Conn, error) {
	l.mu.Lock()
	cut := l.cut
	l.mu.Unlock()
	if cut {
		return nil, errCut
	}
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).Dial(network, address)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut {
		c.Close()
		return nil, errCut
	}
	// Forget the sockets already closed (reconnects), so that the list stays short.
	live := l.conns[:0]
	for _, o := range l.conns {
		if !closed(o) {
			live = append(live, o)
		}
	}
	l.conns = append(live, c)
	return c, nil
}

// closed reports whether c was closed locally (a reconnect's old socket).
func closed(c net.Conn) bool {
	return c.SetDeadline(time.Time{}) != nil
}

// Cut closes every socket and refuses new ones: the server sees the client's socket close.
func (l *link) Cut() {
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}
