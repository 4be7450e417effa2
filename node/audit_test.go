package node

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// A worker started with --api-tokens-file: a read token cannot submit, a submit token cannot
// delete, and `worker audit` lists the accepted writes with their tokens' names.
func TestAudit_TokensFileAndCommand(t *testing.T) {
	c := newCluster(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("viewer read viewer-secret-0123456789\nci submit ci-secret-0123456789abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env["API_TOKENS_FILE"] = tokens
	c.startWorker(t, builtin.Registry(), "audit-w1")
	cli := c.node(t, builtin.Registry())
	var ws struct {
		Leader struct {
			HTTPAddr string `json:"http_addr"`
		} `json:"leader"`
	}
	_, out, _ := run(t, cli, "workers", "--json")
	if err := json.Unmarshal([]byte(out), &ws); err != nil || ws.Leader.HTTPAddr == "" {
		t.Fatalf("workers --json: %v %s", err, out)
	}
	base := "http://" + ws.Leader.HTTPAddr
	do := func(method, path, token, body string) (int, string) {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		_, _ = io.Copy(&b, resp.Body)
		return resp.StatusCode, b.String()
	}
	var code int
	testenv.Eventually(t, 30*time.Second, 100*time.Millisecond, func() bool {
		code, _ = do("GET", "/api/v1/whoami", "viewer-secret-0123456789", "")
		return code == 200
	}, "the job API answers")
	submit := `{"type":"primes","params":{"from":0,"to":1000,"shards":2}}`
	if code, body := do("POST", "/api/v1/jobs", "viewer-secret-0123456789", submit); code != 403 {
		t.Fatalf("read token submits: %d %s", code, body)
	}
	code, body := do("POST", "/api/v1/jobs", "ci-secret-0123456789abc", submit)
	var sub struct{ ID string }
	if code != 201 || json.Unmarshal([]byte(body), &sub) != nil {
		t.Fatalf("submit token submits: %d %s", code, body)
	}
	if code, body := do("DELETE", "/api/v1/jobs/"+sub.ID, "ci-secret-0123456789abc", ""); code != 403 {
		t.Fatalf("submit token deletes: %d %s", code, body)
	}
	code, out, errOut := run(t, cli, "audit")
	if code != 0 || !strings.Contains(out, "ci") || !strings.Contains(out, "job.submit") || !strings.Contains(out, sub.ID) || strings.Contains(out, "job.delete") {
		t.Fatalf("audit: %d\n%s%s", code, out, errOut)
	}
	if code, out, _ := run(t, cli, "audit", "--job", sub.ID, "--json"); code != 0 || !strings.Contains(out, `"actor": "ci"`) || !strings.Contains(out, `"role": "submit"`) {
		t.Fatalf("audit --json: %d %s", code, out)
	}
	if code, _, errOut := run(t, cli, "audit", "--limit", "0"); code != 2 || !strings.Contains(errOut, "--limit 0") {
		t.Fatalf("audit --limit 0: %d %s", code, errOut)
	}
}
