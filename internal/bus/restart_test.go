package bus_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/harness/testkeys"
)

func startNATS(t *testing.T, port int, dir string) *server.Server {
	return testenv.NATSServer(t, &server.Options{Port: port, JetStream: true, StoreDir: dir})
}

// Across a NATS restart, a live worker's feed recovers, and the shards a worker that died held
// come back within seconds (the shard timeout), not after the old 30s.
func TestShards_DeadWorkersShardsBackAfterNATSRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := startNATS(t, -1, dir)
	url := s.ClientURL()
	live := connect(t, url)
	dead, err := bus.Connect(url, "dead", bus.Config{Keys: testkeys.Keys()})
	if err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Outgoing
	for i := 0; i < 4; i++ {
		msgs = append(msgs, bus.Outgoing{Subject: live.ShardTypeSubject("t", "j"), MsgID: fmt.Sprintf("j/%d", i), Data: []byte{byte(i)}})
	}
	if err := live.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	holder, err := dead.Shards(ctx, shardOpts(4, "t"))
	if err != nil {
		t.Fatal(err)
	}
	recv(t, holder.C, 1)
	for holder.Held() < 4 {
		time.Sleep(10 * time.Millisecond)
	}
	f, err := live.Shards(ctx, shardOpts(8, "t")) // a live worker, before the restart
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()

	p := serverPort(t, s)
	s.Shutdown()
	s.WaitForShutdown()
	dead.Close() // the worker dies while NATS is down
	s = startNATS(t, p, dir)
	restarted := time.Now()

	got := recv(t, f.C, 4) // recv gives up after 10s
	for _, d := range got {
		if d.Attempt() < 2 {
			t.Fatalf("attempt %d: want a redelivery", d.Attempt())
		}
		_ = d.Ack()
	}
	t.Logf("a dead worker's shards were back %v after NATS restarted", time.Since(restarted).Round(time.Millisecond))
}

func serverPort(t *testing.T, s *server.Server) int {
	t.Helper()
	addr, ok := s.Addr().(*net.TCPAddr)
	if !ok {
		t.Fatalf("server address %v", s.Addr())
	}
	return addr.Port
}

// An idle feed's long poll is asked again when the connection comes back: a server that
// crashed (here: its goodbye lost, then restarted) forgot the pull request, and waiting out the
// poll (15 s) would leave a shard queued that long.
func TestShards_IdlePollAskedAgainAtReconnect(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := startNATS(t, -1, dir)
	p := serverPort(t, s)
	px, err := faultproxy.New(fmt.Sprintf("127.0.0.1:%d", p))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	b := connect(t, "nats://"+px.Addr())
	f, err := b.Shards(ctx, shardOpts(4, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	time.Sleep(300 * time.Millisecond) // the feed found nothing and long-polls
	reconnects := b.Conn().Stats().Reconnects
	px.Blackhole() // the server's goodbye to the pull request never arrives
	s.Shutdown()
	s.WaitForShutdown()
	s = startNATS(t, p, dir)
	px.Reset()
	px.Heal()
	deadline := time.Now().Add(10 * time.Second)
	for b.Conn().Stats().Reconnects == reconnects && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the reconnect's new poll is out
	pub := connect(t, s.ClientURL())
	sent := time.Now()
	if err := pub.PublishAll(ctx, []bus.Outgoing{{Subject: pub.ShardTypeSubject("t", "j"), MsgID: "j/0", Data: []byte{1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-f.C:
		_ = d.Ack()
		t.Logf("delivered %v after the publish", time.Since(sent).Round(time.Millisecond))
	case <-time.After(5 * time.Second): // a third of the poll: only a new poll delivers this soon
		t.Fatal("an idle feed's shard was not delivered within 5 s of a reconnect")
	}
}
