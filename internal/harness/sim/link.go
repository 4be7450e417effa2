package sim

import (
	"io"
	"net"
	"sync"
)

// link forwards one member's NATS connections to the server, so that Cut can close them as a
// process's death would.
type link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	conns []net.Conn
	cut   bool
}

// newLink listens on a free 127.0.0.1 port and forwards every connection to target (host:port).
func newLink(target string) (*link, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	l := &link{ln: ln, target: target}
	go l.serve()
	return l, nil
}

// URL is the NATS URL of the link.
func (l *link) URL() string { return "nats://" + l.ln.Addr().String() }

func (l *link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		l.mu.Lock()
		if l.cut {
			l.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		l.conns = append(l.conns, c, s)
		l.mu.Unlock()
		go pipe(c, s)
		go pipe(s, c)
	}
}

func pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Cut closes the listener and every connection: the server sees the client's socket close.
func (l *link) Cut() {
	l.mu.Lock()
	l.cut = true
	conns := l.conns
	l.conns = nil
	l.mu.Unlock()
	l.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}
