package node

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/api"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

const retryTestToken = "0123456789abcdef-retry-token"

// A retry from the CLI and from the API of a job submitted with priority 5 shows priority 5:
// both copy the whole spec, as the leader's automatic retry does.
func TestRetry_KeepsPriority_CLIAndAPI(t *testing.T) {
	c := newCluster(t)
	c.startWorker(t, builtin.Registry(), "w1")
	n := c.node(t, builtin.Registry())
	code, out, stderr := run(t, n, "submit", "--type", "sleep", "--params", `{"shards":1,"fail_always":[0]}`, "--priority", "5",
		"--wait", "--quiet", "--poll", "50ms")
	if code != 1 {
		t.Fatalf("failing job: exit %d\n%s%s", code, out, stderr)
	}
	failed := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])

	code, out, stderr = run(t, n, "retry", failed)
	if code != 0 {
		t.Fatalf("retry: exit %d %s", code, stderr)
	}
	cliRetry := strings.TrimSpace(out)
	if got := cliStatus(t, n, cliRetry); got.Priority != 5 || got.RetryOf != failed {
		t.Errorf("CLI retry %s: priority %d, retry_of %q; want 5 and %s", cliRetry, got.Priority, got.RetryOf, failed)
	}

	api := c.apiServer(t)
	req, _ := http.NewRequest("POST", api.URL+"/api/v1/jobs/"+failed+"/retry", nil)
	req.Header.Set("Authorization", "Bearer "+retryTestToken)
	var created struct{ ID, RetryOf string }
	if code := doJSON(t, req, &created); code != http.StatusCreated || created.ID == "" {
		t.Fatalf("POST retry: %d %+v", code, created)
	}
	req, _ = http.NewRequest("GET", api.URL+"/api/v1/jobs/"+created.ID, nil)
	var job client.Status
	if code := doJSON(t, req, &job); code != http.StatusOK || job.Priority != 5 || job.RetryOf != failed {
		t.Errorf("API retry %s: %d, priority %d, retry_of %q; want 5 and %s", created.ID, code, job.Priority, job.RetryOf, failed)
	}
	if got := cliStatus(t, n, created.ID); got.Priority != 5 {
		t.Errorf("status of API retry %s: priority %d, want 5", created.ID, got.Priority)
	}
}

// cliStatus reads one job with `status ID --json`.
func cliStatus(t *testing.T, n *Node, id string) client.Status {
	t.Helper()
	code, out, stderr := run(t, n, "status", id, "--json")
	if code != 0 {
		t.Fatalf("status %s: exit %d %s", id, code, stderr)
	}
	var st client.Status
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.ID != id {
		t.Fatalf("status %s --json: %v\n%s", id, err, out)
	}
	return st
}

// apiServer serves the job API as a worker does, over a client of the cluster.
func (c *cluster) apiServer(t *testing.T) *httptest.Server {
	t.Helper()
	conn := c.env["AZURE_STORAGE_CONNECTION_STRING"]
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	q, err := queue.New(conn, c.env["JOBS_QUEUE"])
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Store: store.New(bc, c.env["JOBS_CONTAINER"]), Queue: q, Registry: builtin.Registry()}
	srv, err := api.New(api.Config{Jobs: cl, Schedules: cl, Token: []byte(retryTestToken), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs
}

// doJSON sends req and decodes its JSON answer into v.
func doJSON(t *testing.T, req *http.Request, v any) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s %s: %d %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return resp.StatusCode
}
