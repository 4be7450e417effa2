package node

import (
	"context"
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
	"github.com/mapagg/mapagg/store"
)

// unreachable names storage and NATS that nothing answers: a refused job never reaches them.
var unreachable = []string{
	"--azure-connection-string=DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;" +
		"AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;" +
		"BlobEndpoint=http://127.0.0.1:1/devstoreaccount1;QueueEndpoint=http://127.0.0.1:1/devstoreaccount1;",
	"--nats-url", "nats://127.0.0.1:1",
}

// Each rule of a submitted job has one message, client.Submit's: the CLI shows it as a usage
// error (exit 2) and the HTTP API as a 400 naming the field, neither checking anything itself.
func TestSubmit_RefusalMessages(t *testing.T) {
	reg := withSquares(builtin.Registry())
	n, err := New(Options{Registry: reg, LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	api := refusingAPI(t, &client.Client{Registry: reg})
	primes := `{"from":0,"to":10,"shards":1}`
	for _, tc := range []struct {
		name  string
		cli   []string // after submit and the unreachable cluster; nil: not a CLI case
		body  string   // POST /api/v1/jobs; "": not an API case
		field string
		want  string
	}{
		{"no type", []string{"--params", "{}"}, `{"params":{}}`, "type",
			"bad job spec: type is required: a job type the cluster runs (`worker types` lists them)"},
		{"params not JSON", []string{"--type", "primes", "--params", "{bad"}, "", "params",
			"bad job spec: params of primes are not valid JSON"},
		{"priority above", []string{"--type", "primes", "--params", primes, "--priority", "11"}, `{"type":"primes","params":` + primes + `,"priority":11}`, "priority",
			"bad job spec: priority 11 is out of range: use -10 to 10 (each step up doubles the job's share of the workers against running jobs of its type; default 0)"},
		{"priority below", []string{"--type", "primes", "--params", primes, "--priority", "-11"}, `{"type":"primes","params":` + primes + `,"priority":-11}`, "priority",
			"bad job spec: priority -11 is out of range: use -10 to 10"},
		{"retries above", []string{"--type", "primes", "--params", primes, "--retries", "11"}, "", "retries",
			"bad job spec: retries 11 is out of range: use 0 to 10"},
		{"retries below", []string{"--type", "primes", "--params", primes, "--retries", "-1"}, "", "retries",
			"bad job spec: retries -1 is out of range: use 0 to 10"},
		{"after bad id", []string{"--type", "primes", "--params", primes, "--after", "a,BAD"}, `{"type":"primes","params":` + primes + `,"after":["a","BAD"]}`, "after",
			`bad job spec: after bad job id "BAD": only a-z, 0-9 and '-' (not first) are allowed`},
		{"after twice", []string{"--type", "primes", "--params", primes, "--after", "a,a"}, `{"type":"primes","params":` + primes + `,"after":["a","a"]}`, "after",
			"bad job spec: after names job a twice"},
		{"output format unknown", []string{"--type", "primes", "--params", primes, "--output-format", "csv"}, `{"type":"primes","params":` + primes + `,"output_format":"csv"}`, "output_format",
			`bad job spec: output_format "csv" is not a format: use tsv, jsonl, tsv.zst, jsonl.zst, or leave it out`},
		{"bad params", []string{"--type", "squares", "--params", `{"n":0,"shards":1}`}, `{"type":"squares","params":{"n":0,"shards":1}}`, "n",
			`bad parameters for squares: "n" must be 1 to 1000000 (got 0)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cli != nil {
				args := append(append([]string{"submit"}, unreachable...), tc.cli...)
				code, stdout, stderr := run(t, n, args...)
				if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
					t.Errorf("CLI: exit %d, stdout %q, stderr:\n%s\nwant exit 2 and %q", code, stdout, stderr, tc.want)
				}
			}
			if tc.body != "" {
				code, body := api(tc.body)
				if code != http.StatusBadRequest || !strings.Contains(body["error"], tc.want) || body["field"] != tc.field {
					t.Errorf("API: %d %v\nwant 400, field %q and %q", code, body, tc.field, tc.want)
				}
			}
		})
	}
}

// refusingAPI serves the job API over cl, whose storage is never reached (every job is
// refused), and returns a function that POSTs a body to /api/v1/jobs.
func refusingAPI(t *testing.T, cl *client.Client) func(body string) (int, map[string]string) {
	t.Helper()
	srv, err := api.New(api.Config{Jobs: cl, Token: []byte(retryTestToken), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return func(body string) (int, map[string]string) {
		req, _ := http.NewRequest("POST", hs.URL+"/api/v1/jobs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+retryTestToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		var out map[string]string
		if err := json.Unmarshal(data, &out); err != nil {
			t.Fatalf("%d %s: %v", resp.StatusCode, data, err)
		}
		return resp.StatusCode, out
	}
}

// --output-format reaches the stored spec; without it the spec has none (the default).
func TestSubmit_OutputFormatFlag(t *testing.T) {
	c := newCluster(t)
	c.startResponderOnly(t, builtin.Registry(), "w-types")
	n := c.node(t, builtin.Registry())
	conn := c.env["AZURE_STORAGE_CONNECTION_STRING"]
	bc, err := store.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	cl := &client.Client{Store: store.New(bc, c.env["JOBS_CONTAINER"])}
	params := `{"job":"20261125-120000-0123abcd","by":"value"}`
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--output-format", "tsv.zst"}, "tsv.zst"},
		{nil, ""},
	} {
		args := append([]string{"submit", "--quiet", "--type", "regroup", "--params", params}, tc.args...)
		code, out, stderr := run(t, n, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\n%s", tc.args, code, stderr)
		}
		spec, err := cl.Spec(context.Background(), strings.TrimSpace(out))
		if err != nil || spec.OutputFormat != tc.want {
			t.Errorf("%v: spec %+v, %v; want output format %q", tc.args, spec, err, tc.want)
		}
	}
}
