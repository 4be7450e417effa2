package devserver

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsServer returns the one nats-server binary (built when absent).
func natsServer(t *testing.T) string {
	t.Helper()
	p, err := NATSBin(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A nats-server process killed with SIGKILL comes back on the same port with its stream.
func TestNATSProcess_KillAndRestartKeepsPortAndStore(t *testing.T) {
	n, err := StartNATSProcess(natsServer(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nc, err := nats.Connect(n.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "T", Subjects: []string{"t.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "t.a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	pid, port := n.PID(), n.Port
	if err := n.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if n.PID() != 0 || syscall.Kill(pid, 0) == nil {
		t.Fatalf("pid %d still running after SIGKILL", pid)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	if n.Port != port || n.PID() == pid {
		t.Fatalf("restarted on port %d pid %d, want port %d and a new pid", n.Port, n.PID(), port)
	}
	for {
		s, err := js.Stream(ctx, "T")
		if err == nil {
			if info, err := s.Info(ctx); err == nil {
				if info.State.Msgs != 1 {
					t.Fatalf("%d messages after the restart, want 1 (a synced publish survives)", info.State.Msgs)
				}
				break
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("stream not back after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	pid = n.PID()
	n.Stop()
	if syscall.Kill(pid, 0) == nil {
		t.Fatalf("pid %d still running after Stop", pid)
	}
}

// Each Azurite service can be killed and restarted on its port on its own.
func TestAzurite_KillAndRestartOneService(t *testing.T) {
	a, err := StartAzurite(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	for _, s := range []Service{Blob, Queue} {
		pid := a.PID(s)
		other := a.PID(1 - s)
		if err := a.Kill(s, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if a.PID(s) != 0 || syscall.Kill(pid, 0) == nil {
			t.Fatalf("%v: pid %d still running after SIGKILL", s, pid)
		}
		if a.PID(1-s) != other {
			t.Fatalf("killing %v touched the other service", s)
		}
		if err := a.Restart(s); err != nil {
			t.Fatal(err)
		}
		if a.PID(s) == 0 || a.PID(s) == pid {
			t.Fatalf("%v: restarted pid %d", s, a.PID(s))
		}
	}
	if err := a.Kill(Blob, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := a.Restart(Blob); err != nil {
		t.Fatal(err)
	}
	pids := []int{a.PID(Blob), a.PID(Queue)}
	a.Stop()
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Fatalf("pid %d still running after Stop", pid)
		}
	}
}

// A node of a NATS cluster stopped and started again comes back on its port, and the cluster
// keeps a JetStream meta leader.
func TestNATSCluster_NodeRestartsAsItself(t *testing.T) {
	c, err := StartNATSCluster(t.TempDir(), 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if got := len(strings.Split(c.URLs(), ",")); got != 3 {
		t.Fatalf("URLs %q: %d nodes, want 3", c.URLs(), got)
	}
	c.StopNode(0)
	if nc, err := nats.Connect(c.URL(0), nats.NoReconnect()); err == nil {
		nc.Close()
		t.Fatalf("node 0 still accepts connections after StopNode")
	}
	if err := c.Start(0); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URL(0))
	if err != nil {
		t.Fatalf("node 0 after Start: %v", err)
	}
	nc.Close()
	for deadline := time.Now().Add(30 * time.Second); !c.hasMetaLeader(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader within 30s of the restart")
		}
	}
}

// FreePorts never returns the same port twice in one call.
func TestFreePorts_Distinct(t *testing.T) {
	ports, err := FreePorts(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if seen[p] {
			t.Fatalf("port %d twice in %v", p, ports)
		}
		seen[p] = true
	}
}
