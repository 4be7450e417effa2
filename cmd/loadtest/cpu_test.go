package main

import (
	"os"
	"testing"
	"time"
)

func TestProcCPU_CountsThisProcess(t *testing.T) {
	before, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
	}
	after, err := procCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Fatalf("CPU time did not grow over 100ms of spinning: %v then %v", before, after)
	}
	if _, err := procCPU(-1); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}
