package node

import (
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
)

func TestRetention_Set(t *testing.T) {
	day := 24 * time.Hour
	for _, c := range []struct {
		in       string
		ok, fail time.Duration
		err      string
	}{
		{"7d,30d", 7 * day, 30 * day, ""},
		{"36h", 36 * time.Hour, 36 * time.Hour, ""},
		{"0", 0, 0, ""},
		{"1m,0", time.Minute, 0, ""},
		{"soon", 0, 0, `"soon" is not a duration`},
		{"-1h", 0, 0, "is not a duration"},
		{"1d,2d,3d", 0, 0, "give DURATION or SUCCEEDED,FAILED"},
	} {
		var r Retention
		err := r.Set(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || r.Succeeded != c.ok || r.Failed != c.fail {
			t.Errorf("%q: %+v %v", c.in, r, err)
		}
	}
	if got := DefaultRetention.String(); got != "7d,30d" {
		t.Errorf("default: %q", got)
	}
}

func TestRetention_Flag(t *testing.T) {
	n, err := New(Options{Registry: builtin.Registry(), LookupEnv: func(k string) (string, bool) {
		if k == "RETENTION" {
			return "later", true
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	code, _, stderr := run(t, n, "run", "--azure-connection-string=UseDevelopmentStorage=true")
	if code != 2 || !strings.Contains(stderr, "RETENTION") || !strings.Contains(stderr, `"later" is not a duration`) {
		t.Fatalf("bad RETENTION: exit %d\n%s", code, stderr)
	}
	f := n.newRunFlags()
	if err := f.fs.parse([]string{"--retention", "1m,2h"}); err != nil {
		t.Fatal(err)
	}
	p := f.config(nil).parts()
	if p.coordinator.RetainSucceeded != time.Minute || p.coordinator.RetainFailed != 2*time.Hour {
		t.Fatalf("coordinator retention: %v %v", p.coordinator.RetainSucceeded, p.coordinator.RetainFailed)
	}
	if p := (Config{}).parts(); p.coordinator.RetainSucceeded != 7*24*time.Hour || p.coordinator.RetainFailed != 30*24*time.Hour {
		t.Fatalf("default retention: %v %v", p.coordinator.RetainSucceeded, p.coordinator.RetainFailed)
	}
}
