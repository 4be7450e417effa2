package faultproxy

import (
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// through starts a NATS server and a proxy in front of it, and returns a client connected
// through the proxy and one connected directly.
func through(t *testing.T, opts ...nats.Option) (*Proxy, *nats.Conn, *nats.Conn) {
	t.Helper()
	u := testenv.NATS(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(pu.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(50 * time.Millisecond)}, opts...)
	nc, err := nats.Connect("nats://"+p.Addr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	direct, err := nats.Connect(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(direct.Close)
	return p, nc, direct
}

func TestProxy_Pass_ForwardsBothWays(t *testing.T) {
	p, nc, direct := through(t)
	sub, err := nc.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := direct.Publish("x", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	m, err := sub.NextMsg(2 * time.Second)
	if err != nil || string(m.Data) != "hello" {
		t.Fatalf("got %v, %v; want hello", m, err)
	}
	if s := p.Stats(); s.Accepted != 1 || s.Open != 1 || s.Bytes == 0 {
		t.Fatalf("stats %+v: want one open connection that carried bytes", s)
	}
}

func TestProxy_Blackhole_IsSilentAndHealDeliversHeldBytes(t *testing.T) {
	disconnected := make(chan struct{}, 1)
	p, nc, direct := through(t, nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case disconnected <- struct{}{}:
		default:
		}
	}))
	sub, err := nc.SubscribeSync("x")
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	p.Blackhole()
	if p.Mode() != Blackhole {
		t.Fatalf("mode %v, want blackhole", p.Mode())
	}
	if err := direct.Publish("x", []byte("held")); err != nil {
		t.Fatal(err)
	}
	if err := direct.Flush(); err != nil {
		t.Fatal(err)
	}
	// Silent: the client still believes it is connected, but a round trip does not come back.
	if err := nc.FlushTimeout(300 * time.Millisecond); err == nil {
		t.Fatal("flush through a blackhole succeeded")
	}
	if !nc.IsConnected() {
		t.Fatalf("client status %v during a blackhole: want connected (no FIN, no RST)", nc.Status())
	}
	if _, err := sub.NextMsg(200 * time.Millisecond); err == nil {
		t.Fatal("a message crossed the blackhole")
	}
	p.Heal()
	m, err := sub.NextMsg(2 * time.Second)
	if err != nil || string(m.Data) != "held" {
		t.Fatalf("after heal got %v, %v; want the held message", m, err)
	}
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		t.Fatalf("flush after heal: %v", err)
	}
	select {
	case <-disconnected:
		t.Fatal("the client saw a disconnect: the blackhole was not silent")
	default:
	}
}

func TestProxy_Blackhole_HoldsNewConnections(t *testing.T) {
	p, _, _ := through(t)
	p.Blackhole()
	_, err := nats.Connect("nats://"+p.Addr(), nats.Timeout(300*time.Millisecond))
	if err == nil {
		t.Fatal("connected through a blackhole")
	}
	p.Heal()
	nc, err := nats.Connect("nats://" + p.Addr())
	if err != nil {
		t.Fatalf("connect after heal: %v", err)
	}
	nc.Close()
}

func TestProxy_Reset_DisconnectsAtOnceAndClientReconnects(t *testing.T) {
	disconnected := make(chan struct{}, 1)
	p, nc, _ := through(t, nats.DisconnectErrHandler(func(*nats.Conn, error) {
		select {
		case disconnected <- struct{}{}:
		default:
		}
	}))
	if n := p.Reset(); n != 1 {
		t.Fatalf("reset %d connections, want 1", n)
	}
	select {
	case <-disconnected:
	case <-time.After(2 * time.Second):
		t.Fatal("the client did not notice the reset")
	}
	testenv.Eventually(t, 5*time.Second, 10*time.Millisecond, nc.IsConnected, "reconnect through the proxy")
	if err := nc.FlushTimeout(2 * time.Second); err != nil {
		t.Fatalf("flush after reconnect: %v", err)
	}
	if s := p.Stats(); s.Resets != 1 || s.Accepted != 2 {
		t.Fatalf("stats %+v: want 1 reset, 2 accepted", s)
	}
}

func TestProxy_Delay_AddsLatencyBothWays(t *testing.T) {
	p, nc, _ := through(t)
	const d = 100 * time.Millisecond
	p.Delay(d)
	rtt, err := nc.RTT()
	if err != nil {
		t.Fatal(err)
	}
	if rtt < 2*d {
		t.Fatalf("rtt %v with %v each way, want at least %v", rtt, d, 2*d)
	}
	p.Heal()
	if rtt, err = nc.RTT(); err != nil || rtt >= d {
		t.Fatalf("rtt %v (%v) after heal, want below %v", rtt, err, d)
	}
}

func TestListen_RefusesNonLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "example.com:0", "nonsense"} {
		if p, err := Listen(addr, "127.0.0.1:4222"); err == nil {
			_ = p.Close()
			t.Errorf("Listen(%q) accepted a non-loopback address", addr)
		}
	}
}

func TestProxy_Close_EndsConnections(t *testing.T) {
	p, nc, _ := through(t, nats.MaxReconnects(0))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 2*time.Second, 10*time.Millisecond, func() bool { return !nc.IsConnected() }, "client sees the close")
}
