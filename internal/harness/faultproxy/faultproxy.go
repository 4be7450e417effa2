// Package faultproxy is a TCP proxy that fails its connections on command.
//
// It forwards connections to a target and, on command, blackholes them (no FIN, nothing
// forwarded), resets them, or delays them.
//
// Put one proxy in front of each process whose link should fail: the process dials Addr, the
// proxy dials Target. A blackhole holds the bytes in both directions, as a network that drops
// packets would (the sender's TCP keeps them for retransmission); Heal delivers them, so a
// connection that neither side gave up on carries on unharmed. Reset ends every connection with
// a TCP RST. Delay adds a one-way latency to every chunk in both directions.
//
// The proxy listens on 127.0.0.1 only. It is for tests and the chaos command, not production.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// Mode is what the proxy does to traffic now.
type Mode int

const (
	// Pass forwards traffic (after the delay, if one is set).
	Pass Mode = iota
	// Blackhole forwards nothing and closes nothing; new connections are accepted and held.
	Blackhole
)

func (m Mode) String() string {
	if m == Blackhole {
		return "blackhole"
	}
	return "pass"
}

// Stats are counters since the proxy started.
type Stats struct {
	Accepted int // connections accepted
	Open     int // connections open now
	Resets   int // connections ended by Reset
	Bytes    int64
}

// Proxy forwards TCP connections from Addr to Target.
type Proxy struct {
	target string
	ln     net.Listener

	mu      sync.Mutex
	mode    Mode
	delay   time.Duration
	changed chan struct{} // closed and replaced on every change of mode or delay
	conns   map[*link]struct{}
	stats   Stats
	closed  bool
	wg      sync.WaitGroup
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target (host:port).
func New(target string) (*Proxy, error) {
	return Listen("127.0.0.1:0", target)
}

// Listen starts a proxy on addr, which must be a loopback address, forwarding to target.
func Listen(addr, target string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("faultproxy: listen address %q is not a loopback IP (use 127.0.0.1)", addr)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{target: target, ln: ln, changed: make(chan struct{}), conns: map[*link]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's listening address (127.0.0.1:port).
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Blackhole stops all traffic, silently, until Heal.
func (p *Proxy) Blackhole() { p.set(Blackhole, -1) }

// Delay adds d of one-way latency in each direction (0 removes it). It does not end a blackhole.
func (p *Proxy) Delay(d time.Duration) { p.set(-1, max(d, 0)) }

// Heal ends a blackhole and removes the delay; held bytes are delivered.
func (p *Proxy) Heal() { p.set(Pass, 0) }

// Mode is the proxy's mode now.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Reset ends every open connection with a TCP RST on both sides. New connections are forwarded
// as before (a blackhole stays on).
func (p *Proxy) Reset() int {
	p.mu.Lock()
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.stats.Resets += len(ls)
	p.mu.Unlock()
	for _, l := range ls {
		l.reset()
	}
	return len(ls)
}

// Stats returns the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.Open = len(p.conns)
	return s
}

// Close stops listening and closes every connection (with a FIN). It waits for the proxy's
// goroutines.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.changed) // wake everything that waits on the gate
	ls := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range ls {
		l.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) set(mode Mode, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if mode >= 0 {
		p.mode = mode
	}
	if delay >= 0 {
		p.delay = delay
	}
	close(p.changed)
	p.changed = make(chan struct{})
}

// gate returns the delay to apply when traffic may flow, or the channel to wait on when it may
// not; done when the proxy is closed.
func (p *Proxy) gate() (delay time.Duration, wait <-chan struct{}, done bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return 0, nil, true
	}
	if p.mode == Blackhole {
		return 0, p.changed, false
	}
	return p.delay, nil, false
}

// pass blocks while the proxy is blackholed; it returns the delay to apply, or false when the
// proxy or the link closed.
func (p *Proxy) pass(stop <-chan struct{}) (time.Duration, bool) {
	for {
		d, wait, done := p.gate()
		if done {
			return 0, false
		}
		if wait == nil {
			return d, true
		}
		select {
		case <-wait:
		case <-stop:
			return 0, false
		}
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			_ = c.Close()
			return
		}
		l := &link{p: p, client: c, stop: make(chan struct{})}
		p.conns[l] = struct{}{}
		p.stats.Accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

// link is one proxied connection.
type link struct {
	p      *Proxy
	client net.Conn

	mu       sync.Mutex
	upstream net.Conn
	stop     chan struct{}
	stopped  bool
	rst      bool
}

func (l *link) run() {
	defer l.p.wg.Done()
	defer func() {
		l.p.mu.Lock()
		delete(l.p.conns, l)
		l.p.mu.Unlock()
	}()
	// A blackhole also holds a connection that has not reached the target yet.
	if _, ok := l.p.pass(l.stop); !ok {
		l.close()
		return
	}
	up, err := net.DialTimeout("tcp", l.p.target, 5*time.Second)
	if err != nil {
		l.reset() // the target refused: the client sees a refusal too
		return
	}
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		_ = up.Close()
		return
	}
	l.upstream = up
	l.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pipe(up, l.client) }()
	go func() { defer wg.Done(); l.pipe(l.client, up) }()
	wg.Wait()
	l.close()
}

type chunk struct {
	b    []byte
	read time.Time
}

// pipe copies src to dst through the gate: a reader that stops reading during a blackhole, and
// a writer that holds what it has and delivers each chunk no sooner than its read time + delay.
func (l *link) pipe(dst, src net.Conn) {
	ch := make(chan chunk, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range ch {
			for {
				d, ok := l.p.pass(l.stop)
				if !ok {
					return
				}
				if wait := time.Until(c.read.Add(d)); wait > 0 {
					t := time.NewTimer(wait)
					select {
					case <-t.C:
					case <-l.p.changedNow():
						t.Stop()
						continue // the mode changed: check the gate again
					case <-l.stop:
						t.Stop()
						return
					}
				}
				break
			}
			if _, err := dst.Write(c.b); err != nil {
				l.close()
				return
			}
			l.p.mu.Lock()
			l.p.stats.Bytes += int64(len(c.b))
			l.p.mu.Unlock()
		}
		// src ended: pass the FIN on.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	defer func() { close(ch); <-done }()
	for {
		if _, ok := l.p.pass(l.stop); !ok {
			return
		}
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case ch <- chunk{b: buf[:n], read: time.Now()}:
			case <-l.stop:
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				l.close()
			}
			return
		}
	}
}

func (p *Proxy) changedNow() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// reset ends both sides with an RST (SO_LINGER 0).
func (l *link) reset() {
	l.mu.Lock()
	l.rst = true
	l.mu.Unlock()
	l.close()
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return
	}
	l.stopped = true
	close(l.stop)
	for _, c := range []net.Conn{l.client, l.upstream} {
		if c == nil {
			continue
		}
		if tc, ok := c.(*net.TCPConn); ok && l.rst {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
	}
}
