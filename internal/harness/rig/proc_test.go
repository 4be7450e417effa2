package rig

import (
	"os"
	"testing"
	"time"
)

func TestProcCPU_CountsThisProcess(t *testing.T) {
	before, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	after, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("CPU time did not grow over 100ms of spinning: %v then %v", before, after)
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

func TestProcRSS_Self(t *testing.T) {
	rss, err := ProcRSS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 || rss > 64<<30 {
		t.Fatalf("own VmRSS %d bytes: not a plausible size", rss)
	}
	if _, err := ProcRSS(-1); err == nil {
		t.Fatal("ProcRSS of no process: no error")
	}
}
