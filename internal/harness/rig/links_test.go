package rig

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
)

func TestProxyLinks_EachWorkerOnItsOwnProxies(t *testing.T) {
	cs := devserver.ConnectionString(10001, 10002)
	links, env, err := ProxyLinks([]string{"w1", "w2"}, "nats://127.0.0.1:4222", cs)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	for _, id := range []string{"w1", "w2"} {
		l := links[id]
		want := []string{"NATS_URL=nats://" + l.NATS.Addr(), "BlobEndpoint=http://" + l.Blob.Addr() + "/", "QueueEndpoint=http://" + l.Queue.Addr() + "/"}
		got := strings.Join(env[id], ";")
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: env %q lacks %q", id, got, w)
			}
		}
		if strings.Contains(got, ":10001/") || strings.Contains(got, ":10002/") {
			t.Errorf("%s: env %q still names a server directly", id, got)
		}
	}
	l := links["w1"]
	l.CutStorage()
	if l.Blob.Mode() != faultproxy.Blackhole || l.Queue.Mode() != faultproxy.Blackhole || l.NATS.Mode() != faultproxy.Pass {
		t.Errorf("CutStorage: blob %v queue %v nats %v", l.Blob.Mode(), l.Queue.Mode(), l.NATS.Mode())
	}
	l.Heal()
	l.CutNATS()
	if l.NATS.Mode() != faultproxy.Blackhole || l.Blob.Mode() != faultproxy.Pass || links["w2"].NATS.Mode() != faultproxy.Pass {
		t.Errorf("CutNATS after Heal: nats %v blob %v, w2 nats %v", l.NATS.Mode(), l.Blob.Mode(), links["w2"].NATS.Mode())
	}
}

func TestProxyLinks_BadInput(t *testing.T) {
	cs := devserver.ConnectionString(10001, 10002)
	for _, c := range []struct{ nats, conn, want string }{
		{"nats://a:1,nats://b:2", cs, "want one"},
		{"nats://127.0.0.1:4222", "AccountName=x;QueueEndpoint=http://127.0.0.1:1/x", "no BlobEndpoint"},
	} {
		if _, _, err := ProxyLinks([]string{"w1"}, c.nats, c.conn); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ProxyLinks(%q, %q) = %v, want an error with %q", c.nats, c.conn, err, c.want)
		}
	}
}
