package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// apiCluster starts two workers whose HTTP API accepts writes with a token; it returns the
// cluster, a follower's base URL and the token file.
func apiCluster(t *testing.T) (*cluster.Cluster, string, string) {
	t.Helper()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("e2e-api-token-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := start(t, cluster.Options{Workers: 2, LeaseDuration: lease, Concurrency: 2, Env: []string{"API_TOKEN_FILE=" + tokenFile}})
	var base string
	testenv.Eventually(t, 15*time.Second, 100*time.Millisecond, func() bool {
		for _, m := range c.Members() {
			if !m.Leader && m.HTTPAddr != "" {
				base = "http://" + m.HTTPAddr
				return true
			}
		}
		return false
	}, "a follower announces its HTTP address")
	return c, base, tokenFile
}

// call sends one API request and returns the status and body.
func call(t *testing.T, method, url, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAPI_CycleOverHTTP is the README's curl cycle against a follower of a real cluster: 401
// without the token (nothing written), 400 naming the field, 201 and an id, the state and the
// exact result over HTTP.
func TestAPI_CycleOverHTTP(t *testing.T) {
	c, base, tokenFile := apiCluster(t)
	tok, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(tok))
	ctx := context.Background()
	body := `{"type":"primes","params":{"from":0,"to":100000,"shards":8}}`

	if code, resp := call(t, "POST", base+"/api/v1/jobs", "", body); code != 401 {
		t.Fatalf("POST without the token = %d %s; want 401", code, resp)
	}
	if list, err := c.Client.List(ctx, 0); err != nil || len(list) != 0 {
		t.Fatalf("after a refused submit the cluster holds %d jobs (%v)", len(list), err)
	}
	code, resp := call(t, "POST", base+"/api/v1/jobs", token, `{"type":"primes","params":{"from":0,"to":100,"shards":0}}`)
	if code != 400 || !strings.Contains(resp, `"field":"shards"`) {
		t.Fatalf("bad params = %d %s; want 400 naming shards", code, resp)
	}
	code, resp = call(t, "POST", base+"/api/v1/jobs", token, body)
	var sub struct{ ID string }
	if err := json.Unmarshal([]byte(resp), &sub); code != 201 || err != nil || sub.ID == "" {
		t.Fatalf("POST = %d %s; want 201 and an id", code, resp)
	}
	var job struct {
		State     string
		ResultURL string `json:"result_url"`
	}
	testenv.Eventually(t, 60*time.Second, 200*time.Millisecond, func() bool {
		_, resp := call(t, "GET", base+"/api/v1/jobs/"+sub.ID, "", "")
		_ = json.Unmarshal([]byte(resp), &job)
		return job.State == "succeeded" || job.State == "failed"
	}, "job %s ends (state %q)", sub.ID, job.State)
	code, resp = call(t, "GET", base+job.ResultURL, "", "")
	if code != 200 || strings.TrimSpace(resp) != `{"count":9592}` {
		t.Fatalf("result = %d %s; want {\"count\":9592} (primes below 10^5)", code, resp)
	}
	if code, resp = call(t, "GET", base+"/api/v1/jobs?state=succeeded&type=primes", "", ""); code != 200 || !strings.Contains(resp, sub.ID) {
		t.Fatalf("list = %d %s", code, resp)
	}
}

// TestAPI_PythonExample runs examples/python/submit.py (the mapagg package's client) against the
// cluster: it submits, waits and prints the exact result.
func TestAPI_PythonExample(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 is not installed: the Python API example cannot run (install python3 to run it)")
	}
	_, base, tokenFile := apiCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, filepath.Join("..", "examples", "python", "submit.py"), "--url", base, "--token-file", tokenFile,
		"--type", "primes", "--params", `{"from":0,"to":100000,"shards":8}`)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("submit.py: %v\nstderr:\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(stdout.String()); got != `{"count": 9592}` {
		t.Fatalf("submit.py printed %q on stdout, want the result {\"count\": 9592}\nstderr:\n%s", got, stderr.String())
	}
	if !strings.Contains(stderr.String(), "succeeded") {
		t.Errorf("submit.py showed no progress on stderr:\n%s", stderr.String())
	}
}

// TestWorkers_OneHostWithoutHTTPSetting starts three workers on this host with no HTTP address
// set (the default :8080): all run, each announces a different address that answers, and
// `worker workers` shows each one's host, pid and address.
func TestWorkers_OneHostWithoutHTTPSetting(t *testing.T) {
	c := start(t, cluster.Options{Workers: 3, LeaseDuration: lease, Concurrency: 1, Env: []string{"HTTP_ADDR="}})
	addrs := map[string]string{}
	testenv.Eventually(t, 20*time.Second, 200*time.Millisecond, func() bool {
		for _, m := range c.Members() {
			if m.HTTPAddr != "" {
				addrs[m.ID] = m.HTTPAddr
			}
		}
		return len(addrs) == 3
	}, "three workers announce an HTTP address (%v)", addrs)
	seen := map[string]bool{}
	for id, a := range addrs {
		if seen[a] {
			t.Fatalf("two workers announce %s: %v", a, addrs)
		}
		seen[a] = true
		if code, body := call(t, "GET", "http://"+a+"/healthz", "", ""); code != 200 || !strings.Contains(body, id) {
			t.Fatalf("%s at %s: /healthz %d %s", id, a, code, body)
		}
		if p := c.Proc(id); p == nil || !strings.Contains(func() string { b, _ := os.ReadFile(p.LogPath); return string(b) }(), `"msg":"http listening"`) {
			t.Fatalf("%s did not log where it listens", id)
		}
	}
	cmd := exec.Command(workerBin, "workers")
	cmd.Env = c.WorkerEnv("cli")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("worker workers: %v\n%s", err, out)
	}
	host, _ := os.Hostname()
	for id := range addrs {
		p := c.Proc(id)
		_, port, _ := strings.Cut(addrs[id], "]:")
		if port == "" {
			_, port, _ = strings.Cut(addrs[id], ":")
		}
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, id+" ") {
				line = l
			}
		}
		if !strings.Contains(line, host) || !strings.Contains(line, " "+strconv.Itoa(p.PID)+" ") || !strings.Contains(line, ":"+port) {
			t.Errorf("worker workers shows %s as %q; want host %s, pid %d, port %s", id, line, host, p.PID, port)
		}
	}
	t.Logf("worker workers:\n%s", out)
}
