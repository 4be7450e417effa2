package rig

import (
	"context"
	"os"
	"os/exec"
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

// A descendant's CPU time counts while it runs and after it was waited for, and
// WaitNoChildren sees the child end.
func TestChildrenCPU_CountsRunningAndEndedChildren(t *testing.T) {
	self := os.Getpid()
	before, err := ChildrenCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	// A shell whose child spins for a fraction of a second, then waits until its stdin closes:
	// the grandchild's CPU counts while it runs too.
	cmd := exec.Command("sh", "-c", `sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'; read x; exit 0`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if WaitNoChildren(context.Background(), []int{self}, 20*time.Millisecond) {
		t.Fatal("WaitNoChildren: true with a child running")
	}
	deadline := time.Now().Add(10 * time.Second)
	running := before
	for running-before < 50*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		if running, err = ChildrenCPU(self); err != nil {
			t.Fatal(err)
		}
	}
	if running-before < 50*time.Millisecond {
		t.Fatalf("a running child's CPU not counted: %v then %v", before, running)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if !WaitNoChildren(context.Background(), []int{self}, 5*time.Second) {
		t.Fatal("WaitNoChildren: false after the child ended")
	}
	after, err := ChildrenCPU(self)
	if err != nil {
		t.Fatal(err)
	}
	if after < running {
		t.Fatalf("an ended child's CPU lost: %v while running, %v after", running, after)
	}
}
