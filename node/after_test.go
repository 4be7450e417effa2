package node

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
)

func TestSubmit_AfterRetriesUsage(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	conn := "--azure-connection-string=UseDevelopmentStorage=true"
	p := []string{"submit", conn, "--type", "primes", "--params", `{"from":0,"to":10,"shards":1}`}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{append(p, "--after", "a,BAD"), `--after: bad job id "BAD"`},
		{append(p, "--after", "a,a"), "--after names job a twice"},
		{append(p, "--retries", "11"), "--retries 11: use 0 to 10"},
		{append(p, "--retries", "-1"), "--retries -1: use 0 to 10"},
	} {
		code, stdout, stderr := run(t, n, tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant %q", tc.args, code, stderr, tc.want)
		}
	}
}
