package node

import (
	"strings"
	"testing"

	"github.com/mapagg/mapagg/builtin"
)

// Each command's -h lists its own flags first and the shared connection flags after them, and
// no flag shows a stray argument name taken from backquotes in its usage.
func TestCommands_HelpShowsOwnFlagsFirst(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry()})
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]string{"submit": "-type string", "status": "-state string", "wait": "-quiet", "run": "-api-token-file string", "workers": "-listen duration"}
	for cmd, flag := range own {
		_, _, stderr := run(t, n, cmd, "-h")
		i, conn := strings.Index(stderr, flag), strings.Index(stderr, "connection flags (every command has them):")
		if i < 0 || conn < 0 || i > conn || strings.Index(stderr, "-azure-connection-string") < conn {
			t.Errorf("%s -h: want %q before the connection flags, the connection string after:\n%s", cmd, flag, stderr)
		}
		for _, glitch := range []string{"-type types", "-http-addr worker"} {
			if strings.Contains(stderr, glitch) {
				t.Errorf("%s -h shows %q", cmd, glitch)
			}
		}
	}
}
