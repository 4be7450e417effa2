package core

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/mapagg/mapagg/internal/harness/testworker/badjobs"
)

func TestIsolate_PanicNamesTheUsersFrame(t *testing.T) {
	reg := badjobs.Registry()
	j, err := reg.Lookup("bad-merge")
	if err != nil {
		t.Fatal(err)
	}
	agg, err := j.NewAggregate(json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	err = Isolate("bad-merge", "merge", func() error { return agg.Merge([]byte(`{"k1":1}`)) })
	var ue *UserCodeError
	if !errors.As(err, &ue) || !ue.Panicked() {
		t.Fatalf("err = %v, want a *UserCodeError of a panic", err)
	}
	for _, want := range []string{"bad-merge merge: panic: assignment to entry in nil map",
		"[at github.com/mapagg/mapagg/internal/harness/testworker/badjobs.mergeCounts (badjobs/badjobs.go:"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("err = %q, want it to hold %q", err, want)
		}
	}
	if !strings.Contains(ue.Stack, "jobs.(*typedAggregate[") {
		t.Errorf("the stack does not show the way in:\n%s", ue.Stack)
	}
	// A runtime error stays matchable.
	var re interface{ RuntimeError() }
	if !errors.As(err, &re) {
		t.Errorf("%v does not unwrap to the runtime error", err)
	}
}

func TestIsolate_ErrorsAndValues(t *testing.T) {
	plain := errors.New("no such blob")
	if err := Isolate("x", "split", func() error { return plain }); err != plain {
		t.Errorf("isolate changed a returned error: %v", err)
	}
	var ue *UserCodeError
	if err := IsolateErr("x", "result", func() error { return plain }); !errors.As(err, &ue) || ue.Panicked() || !errors.Is(err, plain) ||
		err.Error() != "x result: no such blob" {
		t.Errorf("isolateErr = %v", err)
	}
	if err := Isolate("x", "merge", func() error { return nil }); err != nil {
		t.Errorf("isolate = %v", err)
	}
	long := Isolate("x", "merge", func() error { panic(strings.Repeat("y", 1<<20)) })
	if n := len(long.Error()); n > 2*maxPanicText {
		t.Errorf("a 1 MiB panic value makes a %d-byte error", n)
	}
	err := Isolate("x", "merge", func() error { panic(fmt.Sprintf("bad %d", 7)) })
	if !errors.As(err, &ue) || ue.Panic != "bad 7" || !strings.HasPrefix(err.Error(), "x merge: panic: bad 7 [at ") {
		t.Errorf("isolate = %v", err)
	}
}

func TestUserFrame_Packages(t *testing.T) {
	for _, c := range []struct {
		fn, pkg        string
		framework, std bool
	}{
		{"main.main", "main", false, false},
		{"main.(*badMerge).Merge", "main", false, false},
		{"github.com/mapagg/mapagg/jobs.(*typedAggregate[...]).Merge", "github.com/mapagg/mapagg/jobs", true, false},
		{"github.com/mapagg/mapagg/internal/coordinator.(*term).mergeOne.func1", "github.com/mapagg/mapagg/internal/coordinator", true, false},
		{"github.com/mapagg/mapagg/internal/protocol.DecodeResults", "github.com/mapagg/mapagg/internal/protocol", true, false},
		{"github.com/mapagg/mapagg/builtin.Primes.Merge", "github.com/mapagg/mapagg/builtin", false, false},
		{"github.com/mapagg/mapagg/jobs/jobstest.Run", "github.com/mapagg/mapagg/jobs/jobstest", false, false},
		{"example.com/me/myjobs.sum.Merge", "example.com/me/myjobs", false, false},
		{"encoding/json.(*decodeState).object", "encoding/json", false, true},
		{"runtime.gopanic", "runtime", false, true},
	} {
		if got := funcPackage(c.fn); got != c.pkg {
			t.Errorf("funcPackage(%q) = %q, want %q", c.fn, got, c.pkg)
		}
		if got := isFramework(c.pkg); got != c.framework {
			t.Errorf("isFramework(%q) = %v", c.pkg, got)
		}
		if got := isStd(c.pkg); got != c.std {
			t.Errorf("isStd(%q) = %v", c.pkg, got)
		}
	}
}
