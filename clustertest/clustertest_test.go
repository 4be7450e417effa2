package clustertest

import (
	"strings"
	"testing"
)

// A cluster without a worker to build is refused with what to set, before anything starts.
func TestStart_RequiresMainOrBin(t *testing.T) {
	_, err := start(t.TempDir(), Options{})
	if err == nil || !strings.Contains(err.Error(), "Options.Main") {
		t.Fatalf("err %v, want one naming Options.Main", err)
	}
}

// A main package that does not build: the compiler's message, not a hang.
func TestStart_BuildErrorSaysWhat(t *testing.T) {
	_, err := start(t.TempDir(), Options{Main: "./no-such-package"})
	if err == nil || !strings.Contains(err.Error(), "go build ./no-such-package") {
		t.Fatalf("err %v, want the build error", err)
	}
}
