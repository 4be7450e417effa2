package node

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// A wrong account key names the credential and where it is set, without the key; a missing
// container is named with the flag that sets it.
func TestCommands_StorageFailuresExplained(t *testing.T) {
	c := newCluster(t)
	good := c.env["AZURE_STORAGE_CONNECTION_STRING"]
	key := regexp.MustCompile(`AccountKey=([^;]+)`).FindStringSubmatch(good)[1]
	wrongKey := "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
	c.env["AZURE_STORAGE_CONNECTION_STRING"] = strings.Replace(good, key, wrongKey, 1)
	n := c.node(t, builtin.Registry())
	// A live member validates the submitted job (client.Submit checks it before storage).
	c.startResponderOnly(t, builtin.Registry(), "w-types")
	for _, args := range [][]string{
		{"status"},
		{"result", "20261121-000000-00000000"},
		{"submit", "--type", "primes", "--params", `{"from":0,"to":10,"shards":1}`},
		{"run", "--http-addr", "off"}, // at once, not after the startup timeout
	} {
		code, _, stderr := run(t, n, args...)
		if code != 1 || !strings.Contains(stderr, "storage refused the connection string's credentials") || !strings.Contains(stderr, "AccountKey") ||
			!strings.Contains(stderr, "HTTP 403") {
			t.Errorf("%v with a wrong key: exit %d\n%s", args, code, stderr)
		}
		if strings.Contains(stderr, wrongKey) || strings.Contains(stderr, key) || strings.Contains(stderr, "Data Contributor") {
			t.Errorf("%v: the message shows a key or suggests a role:\n%s", args, stderr)
		}
	}

	c.env["AZURE_STORAGE_CONNECTION_STRING"] = good
	n = c.node(t, builtin.Registry())
	container := c.env["JOBS_CONTAINER"]
	for _, args := range [][]string{{"status"}, {"status", "20261121-000000-00000000"}, {"result", "20261121-000000-00000000"}, {"wait", "20261121-000000-00000000"}} {
		code, _, stderr := run(t, n, args...)
		if code != 1 || !strings.Contains(stderr, `container "`+container+`" does not exist`) || !strings.Contains(stderr, "--jobs-container") {
			t.Errorf("%v without the container: exit %d\n%s", args, code, stderr)
		}
	}
}

// A NATS password the server refuses names the user and where the password comes from, not the
// password.
func TestCommands_NATSCredentialsExplained(t *testing.T) {
	s := testenv.NATSServer(t, &server.Options{Users: []*server.User{{Username: "worker", Password: "right-pa55word"}}})
	c := newCluster(t)
	c.env["NATS_URL"], c.env["NATS_USER"], c.env["NATS_PASSWORD"] = s.ClientURL(), "worker", "wrong-pa55word"
	for _, args := range [][]string{{"types"}, {"workers"}} {
		code, _, stderr := run(t, c.node(t, builtin.Registry()), args...)
		if code != 1 || !strings.Contains(stderr, "refused the credentials (user worker)") || !strings.Contains(stderr, "NATS_PASSWORD") ||
			strings.Contains(stderr, "pa55word") {
			t.Errorf("%v with a wrong NATS password: exit %d\n%s", args, code, stderr)
		}
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := readToken(""); tok != nil || err != nil {
		t.Fatalf("no file: %q, %v", tok, err)
	}
	if tok, err := readToken(write("good", "  0123456789abcdef-secret\n")); err != nil || string(tok) != "0123456789abcdef-secret" {
		t.Fatalf("good token: %q, %v", tok, err)
	}
	for name, content := range map[string]string{"short": "tiny-secret\n", "empty": "\n"} {
		_, err := readToken(write(name, content))
		if err == nil || !strings.Contains(err.Error(), "at least 16") || strings.Contains(err.Error(), "tiny-secret") {
			t.Errorf("%s token: %v", name, err)
		}
	}
	if _, err := readToken(dir + "/missing"); err == nil || !strings.Contains(err.Error(), "cannot read it") {
		t.Errorf("missing file: %v", err)
	}
}
