package node

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// Members that start together and race to create the cluster key all end with the same one.
func TestClusterKey_RacingMembersShareOne(t *testing.T) {
	bc, err := store.NewClient(testenv.Azurite(t))
	if err != nil {
		t.Fatal(err)
	}
	name := testenv.Name(t, "lease")
	const n = 6
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := loadClusterKey(context.Background(), store.New(bc, name))
			errs[i] = err
			if err == nil {
				ids[i] = r.Current().ID()
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || ids[i] != ids[0] {
			t.Fatalf("member %d: key %q, %v; member 0: %q", i, ids[i], errs[i], ids[0])
		}
	}
	// A later member reads the same key.
	r, err := loadClusterKey(context.Background(), store.New(bc, name))
	if err != nil || r.Current().ID() != ids[0] {
		t.Fatalf("later member: %v, %v", r, err)
	}
	// A corrupt key blob is an error that says what to do, not a new key.
	if _, err := store.New(bc, name).Put(context.Background(), ClusterKeyBlob, []byte("not a key"), store.Cond{}); err != nil {
		t.Fatal(err)
	}
	if _, err := loadClusterKey(context.Background(), store.New(bc, name)); !errors.Is(err, ErrClusterKey) || !strings.Contains(err.Error(), "replace it with a valid key") {
		t.Fatalf("corrupt blob: %v", err)
	}
}

func newSecret(t *testing.T) (string, bus.Key) {
	t.Helper()
	k, err := bus.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return k.Encode(), k
}

// The explicit key comes from a file or the environment, never both; errors name the source,
// never the key.
func TestClusterKey_ExplicitSources(t *testing.T) {
	secret, k := newSecret(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "key")
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(good, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte(secret[:30]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		args  []string
		env   map[string]string
		id    string // want this key
		err   string // or this error
		blob  bool   // or none (the blob is used)
		leaks string
	}{
		{name: "none", blob: true},
		{name: "file", args: []string{"--cluster-key-file", good}, id: k.ID()},
		{name: "file from env", env: map[string]string{"CLUSTER_KEY_FILE": good}, id: k.ID()},
		{name: "env", env: map[string]string{envClusterKey: secret}, id: k.ID()},
		{name: "both", args: []string{"--cluster-key-file", good}, env: map[string]string{envClusterKey: secret}, err: "both --cluster-key-file and CLUSTER_KEY are set"},
		{name: "bad file", args: []string{"--cluster-key-file", bad}, err: "--cluster-key-file " + bad + ": line 1: bad cluster key: 22 bytes, want 32", leaks: secret[:30]},
		{name: "bad env", env: map[string]string{envClusterKey: "hunter2-not-a-key"}, err: "CLUSTER_KEY: bad cluster key", leaks: "hunter2"},
		{name: "missing file", args: []string{"--cluster-key-file", filepath.Join(dir, "nope")}, err: "cannot read it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(name string) (string, bool) { v, ok := c.env[name]; return v, ok }})
			if err != nil {
				t.Fatal(err)
			}
			f := n.newRunFlags()
			if err := f.fs.parse(c.args); err != nil {
				t.Fatal(err)
			}
			r, err := f.keys.resolve()
			switch {
			case c.err != "":
				if err == nil || !strings.Contains(err.Error(), c.err) || c.leaks != "" && strings.Contains(err.Error(), c.leaks) {
					t.Fatalf("got %v, want an error saying %q without the key", err, c.err)
				}
			case c.blob:
				if r != nil || err != nil {
					t.Fatalf("got %v, %v; want none (the blob)", r, err)
				}
			default:
				if err != nil || r.Current().ID() != c.id {
					t.Fatalf("got %v, %v; want key %s", r, err, c.id)
				}
			}
		})
	}
}

// startMember runs `run` with extra environment and flags until the test ends, and returns its
// log.
func (c *cluster) startMember(t *testing.T, id string, env map[string]string, args ...string) *testenv.SyncBuffer {
	t.Helper()
	saved := c.env
	c.env = map[string]string{}
	for k, v := range saved {
		c.env[k] = v
	}
	for k, v := range env {
		c.env[k] = v
	}
	n := c.node(t, withSquares(builtin.Registry()))
	c.env = saved
	ctx, cancel := context.WithCancel(context.Background())
	logs := &testenv.SyncBuffer{}
	done := make(chan int)
	go func() {
		done <- n.Run(ctx, append([]string{"run", "--id", id, "--concurrency", "2", "--checkpoint-interval", "50ms", "--startup-timeout", "30s", "--http-addr", "off"}, args...), logs, logs)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("worker %s exited %d:\n%s", id, code, logs.String())
		}
	})
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		select {
		case code := <-done:
			t.Fatalf("worker %s exited %d:\n%s", id, code, logs.String())
		default:
		}
		return strings.Contains(logs.String(), `"msg":"worker started"`)
	}, "worker %s did not start; its log:\n%s", id, logs)
	return logs
}

// deadLettered returns the reasons of the dead letters of source.
func deadLettered(t *testing.T, nc *nats.Conn, prefix, source string) []string {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := protocol.NewNames(prefix)
	ctx := context.Background()
	s, err := js.Stream(ctx, names.DeadStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			continue
		}
		if m.Subject == names.DeadSubject(source) {
			out = append(out, m.Header.Get("Reason"))
		}
	}
	return out
}

// A well-formed forged result (right job, right plan epoch, every shard, the genuine message ids),
// published by a plain NATS client while the job runs, changes nothing: the answer is exact, the
// forgeries are dead-lettered as unauthenticated and logged. The explicit key never shows in the
// log, `worker env`, `worker status` or an error.
func TestClusterKey_ForgedResultsRefusedAndKeyNotLeaked(t *testing.T) {
	c := newCluster(t)
	c.env["LOG_LEVEL"] = "info"
	secret, k := newSecret(t)
	logs := c.startMember(t, "w-keyed", map[string]string{envClusterKey: secret}, "--map-delay", "150ms")
	stock := c.node(t, withSquares(builtin.Registry()))
	code, stdout, stderr := run(t, stock, "submit", "--type", "squares", "--params", `{"n":1000,"shards":8}`)
	if code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	job := strings.TrimSpace(stdout)
	nc, err := nats.Connect(c.env["NATS_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	names := protocol.NewNames(c.env["STREAM_PREFIX"])
	// Every shard, plan epochs 1 to 3, attempts 1 to 2: the forgeries of attempt 1 take the
	// genuine results' message ids.
	forge := func() {
		for epoch := uint64(1); epoch <= 3; epoch++ {
			for attempt := 1; attempt <= 2; attempt++ {
				for i := range 8 {
					m := protocol.ResultMsg{Kind: protocol.KindKeyed, Job: job, Index: i, Epoch: epoch, Attempt: attempt, Worker: "w-keyed", Partial: binary.AppendUvarint(nil, 1)}
					data, _ := m.Encode()
					id := protocol.ResultMsgID(job, i, attempt) + "/" + strconv.FormatUint(epoch, 10)
					if epoch == 1 {
						id = protocol.ResultMsgID(job, i, attempt)
					}
					if _, err := js.Publish(context.Background(), names.ResultSubject(job), data, jetstream.WithMsgID(id)); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
	}
	testenv.Eventually(t, 30*time.Second, 10*time.Millisecond, func() bool {
		_, out, _ := run(t, stock, "status", job)
		return strings.Contains(out, "running")
	}, "job %s not running", job)
	forge() // while its shards run (the job takes ~600 ms)
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		_, out, _ := run(t, stock, "result", job)
		return strings.TrimSpace(out) == `{"sum":333833500}`
	}, "result of %s is not exact; log:\n%s", job, logs)
	testenv.Eventually(t, 10*time.Second, 50*time.Millisecond, func() bool {
		return len(deadLettered(t, nc, c.env["STREAM_PREFIX"], bus.SourceResults)) == 48
	}, "forged results not all dead-lettered: %v", deadLettered(t, nc, c.env["STREAM_PREFIX"], bus.SourceResults))
	for _, r := range deadLettered(t, nc, c.env["STREAM_PREFIX"], bus.SourceResults) {
		if !strings.HasPrefix(r, "unauthenticated: no Mapagg-Mac header") {
			t.Fatalf("reason %q", r)
		}
	}
	log := logs.String()
	for _, want := range []string{`"msg":"cluster key"`, `"source":"explicit","keys":"keyring[` + k.ID() + `]"`, `"msg":"refused an unauthenticated message (dead-lettered)"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %s:\n%s", want, log)
		}
	}
	// The secret shows nowhere.
	_, status, _ := run(t, stock, "status", job)
	_, env, _ := run(t, c.node(t, builtin.Registry()), "env")
	c.env[envClusterKey] = secret
	c.env["CLUSTER_KEY_FILE"] = "/nonexistent"
	_, _, badRun := run(t, c.node(t, builtin.Registry()), "run")
	delete(c.env, "CLUSTER_KEY_FILE")
	c.env[envClusterKey] = secret[:40]
	_, _, badKey := run(t, c.node(t, builtin.Registry()), "run")
	if !strings.Contains(badRun, "both --cluster-key-file and CLUSTER_KEY") || !strings.Contains(badKey, "bad cluster key") {
		t.Fatalf("bad key settings not refused:\n%s\n%s", badRun, badKey)
	}
	for what, text := range map[string]string{"log": log, "status": status, "env": env, "error": badRun + badKey} {
		if strings.Contains(text, secret) || strings.Contains(text, secret[:40]) {
			t.Errorf("the cluster key shows in %s:\n%s", what, text)
		}
	}
	if !strings.Contains(env, "CLUSTER_KEY ") || !strings.Contains(env, "CLUSTER_KEY_FILE ") {
		t.Errorf("worker env lacks the cluster key variables:\n%s", env)
	}
}

// Members with different keys (one given a key, one reading the blob) refuse each other's
// messages, and say so in their logs with both key ids, never silently.
func TestClusterKey_MismatchIsLoggedWithKeyIDs(t *testing.T) {
	c := newCluster(t)
	c.env["LOG_LEVEL"] = "info"
	secret, k := newSecret(t)
	explicit := c.startMember(t, "w-explicit", map[string]string{envClusterKey: secret})
	fromBlob := c.startMember(t, "w-blob", nil)
	bc, err := store.NewClient(c.env["AZURE_STORAGE_CONNECTION_STRING"])
	if err != nil {
		t.Fatal(err)
	}
	blobKeys, err := loadClusterKey(context.Background(), store.New(bc, c.env["LEASE_CONTAINER"]))
	if err != nil {
		t.Fatal(err)
	}
	stock := c.node(t, withSquares(builtin.Registry()))
	if code, _, stderr := run(t, stock, "submit", "--type", "squares", "--params", `{"n":1000,"shards":40}`); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, stderr)
	}
	mismatch := func(log string) bool {
		return strings.Contains(log, "refused an unauthenticated message") &&
			(strings.Contains(log, "signed with key "+k.ID()+", this member accepts keys "+blobKeys.Current().ID()) ||
				strings.Contains(log, "signed with key "+blobKeys.Current().ID()+", this member accepts keys "+k.ID()))
	}
	testenv.Eventually(t, 60*time.Second, 50*time.Millisecond, func() bool {
		return mismatch(explicit.String()) || mismatch(fromBlob.String())
	}, "no member logged the key mismatch:\n%s\n%s", explicit, fromBlob)
}
