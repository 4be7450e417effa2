package deploy_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/testenv"
	"github.com/mapagg/mapagg/internal/membership"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/node"
	"github.com/mapagg/mapagg/store"
)

func TestMain(m *testing.M) {
	if err := builtin.Register(jobs.Default()); err != nil {
		panic(err)
	}
	testenv.Main(m)
}

// The NATS permissions docs/deploy.md gives a worker (which may lead) and a submit-only client,
// for the default stream prefix "mapagg". The tests run with exactly these.
var (
	workerPerms = &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"mapagg.>", "$JS.API.>", "$JS.ACK.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"mapagg.ctl.>", "_INBOX.>"}},
	}
	submitPerms = &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{"mapagg.ctl.>"}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>", "mapagg.ctl.members"}},
	}
)

const workerPassword = "w0rker-pa55"

// startNATS starts n clustered in-process NATS nodes accepting users, stopped when the test ends.
func startNATS(t *testing.T, n int, users []*server.User) *devserver.NATSCluster {
	t.Helper()
	c, err := devserver.StartNATSCluster(t.TempDir(), n, users)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// started reports whether a worker's log says it reached storage and NATS (its start-up line; how
// tests learn about elections is clusterEvents, never log text).
func started(log *testenv.SyncBuffer) bool {
	for _, line := range strings.Split(log.String(), "\n") {
		var rec struct{ Msg string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "worker started" {
			return true
		}
	}
	return false
}

// clusterEvents records the typed election and coordinator events every worker publishes on NATS
// (<prefix>.ctl.events), as the dashboard and the test harness read them.
type clusterEvents struct {
	mu   sync.Mutex
	list []membership.Event
}

// watchEvents subscribes to the default prefix's events at url as user/password until the test ends.
func watchEvents(t *testing.T, url, user, password string) *clusterEvents {
	t.Helper()
	ev := &clusterEvents{}
	nc, err := nats.Connect(url, nats.UserInfo(user, password), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if _, err := nc.Subscribe(protocol.NewNames("mapagg").Events(), func(m *nats.Msg) {
		if e, err := membership.DecodeEvent(m.Data); err == nil {
			ev.mu.Lock()
			ev.list = append(ev.list, *e)
			ev.mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ev
}

// count is how many events of kind worker published.
func (ev *clusterEvents) count(worker, kind string) int {
	ev.mu.Lock()
	defer ev.mu.Unlock()
	n := 0
	for _, e := range ev.list {
		if e.Worker == worker && e.Kind == kind {
			n++
		}
	}
	return n
}

// runningWorker is one `worker run` in this process (node.Run, the binary's own code path).
type runningWorker struct {
	id     string
	log    *testenv.SyncBuffer
	cancel context.CancelFunc
	done   chan int
}

// storageNames are one test's containers and queue.
type storageNames struct{ conn, jobs, queue, lease string }

func newStorage(t *testing.T) storageNames {
	return storageNames{conn: testenv.Azurite(t), jobs: testenv.Name(t, "jobs"), queue: testenv.Name(t, "q"), lease: testenv.Name(t, "lease")}
}

func (s storageNames) args() []string {
	return []string{"--azure-connection-string", s.conn, "--jobs-container", s.jobs, "--queue", s.queue, "--lease-container", s.lease}
}

// sasArgs are args with the account reached by its endpoint URLs and an account SAS (blob and
// queue) in a file, instead of the connection string.
func (s storageNames) sasArgs(t *testing.T) []string {
	t.Helper()
	var blobURL, queueURL string
	for _, part := range strings.Split(s.conn, ";") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "BlobEndpoint":
			blobURL = v
		case "QueueEndpoint":
			queueURL = v
		}
	}
	const version = "2021-08-06"
	se := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	key, err := base64.StdEncoding.DecodeString(testenv.AccountKey)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(strings.Join([]string{testenv.AccountName, "rwdlacup", "bq", "sco", "", se, "", "https,http", version, "", ""}, "\n")))
	sas := url.Values{"sv": {version}, "ss": {"bq"}, "srt": {"sco"}, "sp": {"rwdlacup"}, "se": {se}, "spr": {"https,http"},
		"sig": {base64.StdEncoding.EncodeToString(mac.Sum(nil))}}.Encode()
	f := filepath.Join(t.TempDir(), "sas")
	if err := os.WriteFile(f, []byte(sas+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return []string{"--storage-account-url", blobURL, "--storage-queue-url", queueURL, "--storage-sas-file", f,
		"--jobs-container", s.jobs, "--queue", s.queue, "--lease-container", s.lease}
}

// startWorker runs `worker run args...` and returns once it has logged "worker started" (so its
// flag parsing is over before the next worker's starts: the flag registry is process-global).
func startWorker(t *testing.T, id string, args ...string) *runningWorker {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &runningWorker{id: id, log: &testenv.SyncBuffer{}, cancel: cancel, done: make(chan int, 1)}
	go func() {
		w.done <- stockRun(ctx, append([]string{"run", "--id", id, "--http-addr", "127.0.0.1:0"}, args...), w.log, w.log)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !started(w.log) {
		select {
		case code := <-w.done:
			t.Fatalf("worker %s exited %d:\n%s", id, code, w.log)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("worker %s did not start:\n%s", id, w.log)
		}
	}
	t.Cleanup(w.stop)
	return w
}

// stop ends the worker gracefully and waits for it.
func (w *runningWorker) stop() {
	w.cancel()
	select {
	case code := <-w.done:
		w.done <- code
	case <-time.After(60 * time.Second):
		panic("worker " + w.id + " did not stop within 60s")
	}
}

// jobClient is a storage-only client of the test's account.
func jobClient(t *testing.T, s storageNames) *client.Client {
	t.Helper()
	bc, err := store.NewClient(s.conn)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(s.conn, s.queue)
	if err != nil {
		t.Fatal(err)
	}
	st := store.New(bc, s.jobs)
	ctx := context.Background()
	if err := st.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	return &client.Client{Store: st, Queue: q, Registry: jobs.Default()}
}

func passwordFile(t *testing.T, pw string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "nats-password")
	if err := os.WriteFile(f, []byte(pw+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// primesCount reads the count of a finished primes job.
func primesCount(t *testing.T, cl *client.Client, id string) uint64 {
	t.Helper()
	raw, err := cl.Result(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var r builtin.PrimesResult
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return r.Count
}

// runOnce runs `worker run args...` to its end (for runs that must refuse to start).
func runOnce(args []string, log *testenv.SyncBuffer) int {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	return stockRun(ctx, append([]string{"run", "--http-addr", "127.0.0.1:0"}, args...), log, log)
}

// stockRun runs the stock worker command line (the built-ins, the process environment), as the
// binary does.
func stockRun(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	n, err := node.New(node.Options{Registry: builtin.Registry()})
	if err != nil {
		panic(err)
	}
	return n.Run(ctx, args, stdout, stderr)
}
