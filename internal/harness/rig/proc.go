package rig

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
)

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// ProcCPU is the user+system CPU time process pid has used (Linux /proc).
func ProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields are counted after its closing ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 { // utime and stime are fields 14 and 15: 12 and 13 after the name
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// SelfCPU is this process's user+system CPU time (the in-process NATS server, the client and
// the observers).
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// ClusterCPU is the CPU time of c's running worker processes plus this process's. Azurite (a
// separate process the environment starts) is not counted: it serves checkpoints, not shards.
func ClusterCPU(c *cluster.Cluster) time.Duration {
	total := SelfCPU()
	for _, id := range c.Running() {
		if p := c.Proc(id); p != nil {
			if d, err := ProcCPU(p.PID); err == nil {
				total += d
			}
		}
	}
	return total
}

// ProcRSS is the resident set size of process pid in bytes (VmRSS of /proc/<pid>/status).
func ProcRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// LeaderRSS is c's leader and its resident set size in MiB, rounded (0 when unknown).
func LeaderRSS(ctx context.Context, c *cluster.Cluster) (string, float64) {
	l, err := c.Leader(ctx)
	if err != nil || l == nil {
		return "", 0
	}
	if p := c.Proc(l.ID); p != nil {
		if rss, err := ProcRSS(p.PID); err == nil {
			return l.ID, Round3(float64(rss) / (1 << 20))
		}
	}
	return l.ID, 0
}
