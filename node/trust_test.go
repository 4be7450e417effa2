package node

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// cutCluster is a cluster of members that each reach NATS through a fault proxy of their own.
type cutCluster struct {
	*cluster
	ids     []string
	proxies map[string]*faultproxy.Proxy
	logs    map[string]*testenv.SyncBuffer
}

func newCutCluster(t *testing.T, n int) *cutCluster {
	t.Helper()
	c := &cutCluster{cluster: newCluster(t), proxies: map[string]*faultproxy.Proxy{}, logs: map[string]*testenv.SyncBuffer{}}
	c.env["LOG_LEVEL"] = "info"
	u, err := url.Parse(c.env["NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		id := "w" + string(rune('a'+i))
		p, err := faultproxy.New(u.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Close() })
		c.ids, c.proxies[id] = append(c.ids, id), p
		c.logs[id] = c.startMember(t, id, map[string]string{"NATS_URL": "nats://" + p.Addr()}, "--http-addr", "127.0.0.1:0")
	}
	return c
}

// leader reads the lease blob: who leads, and the epoch.
func (c *cutCluster) leader(t *testing.T) (string, uint64) {
	t.Helper()
	bc, err := store.NewClient(c.env["AZURE_STORAGE_CONNECTION_STRING"])
	if err != nil {
		t.Fatal(err)
	}
	l, err := election.ReadLeader(context.Background(), bc, c.env["LEASE_CONTAINER"], "lease")
	if err != nil || l == nil {
		return "", 0
	}
	return l.ID, l.Epoch
}

var httpAddr = regexp.MustCompile(`"msg":"http listening",.*?"addr":"([^"]+)"`)

// ready is the /readyz status code of member id (0 when it does not answer).
func (c *cutCluster) ready(t *testing.T, id string) int {
	t.Helper()
	m := httpAddr.FindStringSubmatch(c.logs[id].String())
	if m == nil {
		t.Fatalf("%s logged no http address:\n%s", id, c.logs[id])
	}
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + m[1] + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// A follower silently cut from NATS (no FIN, packets dropped) changes no leader: it knows it is
// cut off within a second, reports not ready, neither suspects nor campaigns, and is ready again
// by itself after the heal.
func TestPartition_FollowerCutSilentlyChangesNoLeader(t *testing.T) {
	c := newCutCluster(t, 3)
	var leader string
	var epoch uint64
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { leader, epoch = c.leader(t); return epoch > 0 }, "no leader")
	follower := c.ids[0]
	if follower == leader {
		follower = c.ids[1]
	}
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { return c.ready(t, follower) == http.StatusOK }, "%s never ready", follower)
	time.Sleep(2 * time.Second) // the follower hears the leader's beats

	c.proxies[follower].Blackhole()
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() bool { return c.ready(t, follower) == http.StatusServiceUnavailable },
		"a cut-off follower still reports ready")
	time.Sleep(8 * time.Second) // five suspicion timeouts
	c.proxies[follower].Heal()
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { return c.ready(t, follower) == http.StatusOK },
		"%s not ready again after the heal; log:\n%s", follower, c.logs[follower])
	time.Sleep(3 * time.Second)
	if l, e := c.leader(t); l != leader || e != epoch {
		t.Fatalf("leader %s epoch %d after the cut, want %s epoch %d (0 changes); follower log:\n%s", l, e, leader, epoch, c.logs[follower])
	}
}

// A leader silently cut from NATS is replaced exactly once, and does not take the lease back while
// cut off or after the heal.
func TestPartition_LeaderCutSilentlyReplacedOnce(t *testing.T) {
	c := newCutCluster(t, 3)
	var leader string
	var epoch uint64
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { leader, epoch = c.leader(t); return epoch > 0 }, "no leader")
	time.Sleep(2 * time.Second) // the followers hear its beats

	c.proxies[leader].Blackhole()
	cut := time.Now()
	var next string
	var nextEpoch uint64
	testenv.Eventually(t, 15*time.Second, 50*time.Millisecond, func() bool {
		next, nextEpoch = c.leader(t)
		return nextEpoch > epoch
	}, "the cut-off leader was not replaced")
	t.Logf("replaced after %v by %s", time.Since(cut).Round(time.Millisecond), next)
	time.Sleep(8 * time.Second)
	c.proxies[leader].Heal()
	time.Sleep(4 * time.Second)
	if l, e := c.leader(t); e != epoch+1 || l == leader {
		t.Fatalf("leader %s epoch %d, want one change (epoch %d) to another worker; old leader's log:\n%s", l, e, epoch+1, c.logs[leader])
	}
}

// Heartbeats of a high epoch from a plain NATS client without the cluster key (the submit-only
// user may publish on <prefix>.ctl.>) depose nobody: 0 leader changes, each one dead-lettered.
func TestForgedHeartbeat_DeposesNobody(t *testing.T) {
	c := newCutCluster(t, 2)
	var leader string
	var epoch uint64
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { leader, epoch = c.leader(t); return epoch > 0 }, "no leader")
	time.Sleep(time.Second) // the follower hears the leader's beats
	nc, err := nats.Connect(c.env["NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject := protocol.NewNames(c.env["STREAM_PREFIX"]).Control(bus.CtlHeartbeat)
	for i := range 10 {
		data, err := bus.EncodeBeat(election.Beat{Epoch: epoch + 1000 + uint64(i), Identity: "forger", Seq: uint64(i + 1), Sent: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		if err := nc.Publish(subject, data); err != nil {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // two suspicion timeouts after the last forgery
	if l, e := c.leader(t); l != leader || e != epoch {
		t.Fatalf("leader %s epoch %d after forged heartbeats, want %s epoch %d", l, e, leader, epoch)
	}
	// Each member dead-lettered the ten (at most ten a second each).
	testenv.Eventually(t, 5*time.Second, 50*time.Millisecond, func() bool {
		return len(deadLettered(t, nc, c.env["STREAM_PREFIX"], bus.SourceControl)) == 20
	}, "forged heartbeats not dead-lettered: %v", deadLettered(t, nc, c.env["STREAM_PREFIX"], bus.SourceControl))
}

// A worker started with another cluster key than the one the leader signs with neither leads nor
// processes shards, reports not ready and says what to fix; the cluster's job ends exact.
func TestWrongKey_WorkerTakesItselfOut(t *testing.T) {
	c := newCutCluster(t, 1)
	var leader string
	var epoch uint64
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { leader, epoch = c.leader(t); return epoch > 0 }, "no leader")
	secret, _ := newSecret(t)
	c.logs["wrong"] = c.startMember(t, "wrong", map[string]string{envClusterKey: secret}, "--http-addr", "127.0.0.1:0")
	testenv.Eventually(t, 10*time.Second, 100*time.Millisecond, func() bool { return c.ready(t, "wrong") == http.StatusServiceUnavailable },
		"a wrong-key worker reports ready")
	log := c.logs["wrong"].String()
	for _, want := range []string{`"msg":"wrong cluster key"`, "CLUSTER_KEY or --cluster-key-file", "neither leads nor processes shards"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
	if strings.Contains(log, secret) {
		t.Fatal("the key shows in the log")
	}
	stock := c.node(t, withSquares(builtin.Registry()))
	code, stdout, stderr := run(t, stock, "submit", "--type", "squares", "--params", `{"n":1000,"shards":8}`)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	job := strings.TrimSpace(stdout)
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		_, out, _ := run(t, stock, "result", job)
		return strings.TrimSpace(out) == `{"sum":333833500}`
	}, "result of %s is not exact", job)
	if strings.Contains(c.logs["wrong"].String(), `"msg":"processing shards"`) || strings.Contains(c.logs["wrong"].String(), `"msg":"elected"`) {
		t.Fatalf("the wrong-key worker consumed or led:\n%s", c.logs["wrong"])
	}
	if l, e := c.leader(t); l != leader || e != epoch {
		t.Fatalf("leader %s epoch %d, want %s epoch %d", l, e, leader, epoch)
	}
}

// A second process with a live worker's id exits with an error naming the id; the leader stays.
func TestDuplicateID_SecondProcessExits(t *testing.T) {
	c := newCutCluster(t, 1)
	var leader string
	var epoch uint64
	testenv.Eventually(t, 30*time.Second, 50*time.Millisecond, func() bool { leader, epoch = c.leader(t); return epoch > 0 }, "no leader")
	code, _, stderr := run(t, c.node(t, builtin.Registry()), "run", "--id", c.ids[0], "--startup-timeout", "30s", "--http-addr", "off")
	if code == 0 || !strings.Contains(stderr, `worker id "`+c.ids[0]+`" is used by a live process`) {
		t.Fatalf("second process with id %s: exit %d\n%s", c.ids[0], code, stderr)
	}
	time.Sleep(2 * time.Second)
	if l, e := c.leader(t); l != leader || e != epoch {
		t.Fatalf("leader %s epoch %d, want %s epoch %d", l, e, leader, epoch)
	}
}

// The key check compares with the last term's stamp even when nobody holds the lease (a worker
// starting during a failover), and passes for a worker holding the stamped key.
func TestKeyCheck_LastStampWithoutLease(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	container := testenv.Name(t, "lease")
	api := election.NewAzureAPI(bc)
	ctx := context.Background()
	if err := api.EnsureBlob(ctx, container, "lease"); err != nil {
		t.Fatal(err)
	}
	cluster, _ := bus.GenerateKey()
	other, _ := bus.GenerateKey()
	md := map[string]string{election.MetaEpoch: "7", election.MetaLeader: "w9", StampKeyID: cluster.ID()}
	if err := api.SetMetadata(ctx, container, "lease", "", md); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		key   bus.Key
		wrong bool
	}{{cluster, false}, {other, true}} {
		ring, _ := bus.NewKeyring(tc.key)
		stopped := false
		kc := &keyCheck{blob: bc, container: container, keys: ring, log: slog.New(slog.DiscardHandler), onWrong: func() { stopped = true }}
		err := kc.check(ctx)
		if got := errors.Is(err, ErrWrongClusterKey); got != tc.wrong || stopped != tc.wrong || errors.Is(kc.Err(), ErrWrongClusterKey) != tc.wrong {
			t.Errorf("key %s: check %v, stopped %v; want wrong=%v", tc.key.ID(), err, stopped, tc.wrong)
		}
		if kc.ClusterKeyID() != cluster.ID() {
			t.Errorf("ClusterKeyID %q, want %q", kc.ClusterKeyID(), cluster.ID())
		}
		if tc.wrong && !strings.Contains(err.Error(), "w9, epoch 7") {
			t.Errorf("error does not name the leader: %v", err)
		}
	}
}
