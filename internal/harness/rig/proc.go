package rig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	st, err := readStat(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ticks(st.utime + st.stime), nil
}

// ChildrenCPU is the CPU time of pid's descendants (a worker's programs): those that ended and
// were waited for, and those still running as they stand. A child reaped between the two reads
// may count twice or not at all: take it when pid has no child (WaitNoChildren) to be exact.
func ChildrenCPU(pid int) (time.Duration, error) {
	self, err := readStat(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	n := self.cutime + self.cstime
	kids := childrenOf()
	for next := slices.Clone(kids[pid]); len(next) > 0; {
		d := next[0]
		next = append(next[1:], kids[d.pid]...)
		n += d.utime + d.stime + d.cutime + d.cstime
	}
	return ticks(n), nil
}

// WaitNoChildren waits until none of pids has a child process, at most within; it is false
// when one still had. A program's session process ends about a second after its job.
func WaitNoChildren(ctx context.Context, pids []int, within time.Duration) bool {
	deadline := time.Now().Add(within)
	for {
		kids := childrenOf()
		n := 0
		for _, p := range pids {
			n += len(kids[p])
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procStat is what /proc/<pid>/stat says of a process's parent and CPU ticks: its own and
// those of the children it waited for.
type procStat struct {
	pid, ppid                    int
	utime, stime, cutime, cstime int64
}

func readStat(path string) (procStat, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return procStat{}, err
	}
	// The command name (field 2) may hold spaces: fields are counted after its closing ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 { // ppid is field 4, utime to cstime 14 to 17: 1 and 11 to 14 after the name
		return procStat{}, fmt.Errorf("%s: %d fields", path, len(f))
	}
	st := procStat{}
	pid, _, _ := strings.Cut(s, " ")
	st.pid, _ = strconv.Atoi(pid)
	st.ppid, err = strconv.Atoi(f[1])
	for j, p := range []*int64{&st.utime, &st.stime, &st.cutime, &st.cstime} {
		if err != nil {
			break
		}
		*p, err = strconv.ParseInt(f[11+j], 10, 64)
	}
	if err != nil {
		return procStat{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// childrenOf reads every process's stat and lists them by parent.
func childrenOf() map[int][]procStat {
	names, _ := filepath.Glob("/proc/[0-9]*/stat")
	out := map[int][]procStat{}
	for _, name := range names {
		if st, err := readStat(name); err == nil { // an error: it ended meanwhile
			out[st.ppid] = append(out[st.ppid], st)
		}
	}
	return out
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

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
