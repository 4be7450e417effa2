package node

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/testenv"
)

// `worker submit` of a job over a missing input container is a usage error naming it, before
// anything is stored (not even the jobs container a first submit would make).
func TestSubmit_MissingInputContainer(t *testing.T) {
	conn := testenv.Azurite(t)
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	jobsC, missing := testenv.Name(t, "jobs"), testenv.Name(t, "nope")
	code, stdout, stderr := run(t, n, "submit", "--azure-connection-string", conn, "--nats-url", "off",
		"--jobs-container", jobsC, "--queue", testenv.Name(t, "q"), "--type", "wordcount", "--params", `{"container":"`+missing+`"}`)
	if code != 2 || stdout != "" || !strings.Contains(stderr, `input container "`+missing+`" does not exist`) {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s\nwant exit 2 naming container %s", code, stdout, stderr, missing)
	}
}
