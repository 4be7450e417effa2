package rig

import (
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
)

// CPUUse is the CPU time (user + system) of every process a run on a cluster uses.
type CPUUse struct {
	Workers time.Duration // the cluster's running worker processes
	// Programs is the workers' child processes (registered programs): ended ones and the
	// running ones as they stand (rig.ChildrenCPU).
	Programs time.Duration
	Self     time.Duration // this process: the in-process NATS server, the client and the observers
	Storage  time.Duration // the storage emulator's processes the rig started (0 when attached)
}

// Total is the CPU time of every process.
func (u CPUUse) Total() time.Duration { return u.Workers + u.Programs + u.Self + u.Storage }

// Sub is u − v, field by field: the use between two snapshots.
func (u CPUUse) Sub(v CPUUse) CPUUse {
	return CPUUse{Workers: u.Workers - v.Workers, Programs: u.Programs - v.Programs, Self: u.Self - v.Self, Storage: u.Storage - v.Storage}
}

// CPU is a snapshot of the CPU time of c's workers and their programs, this process and the
// storage emulator.
func (r *Rig) CPU(c *cluster.Cluster) CPUUse {
	u := CPUUse{Self: SelfCPU()}
	for _, id := range c.Running() {
		if p := c.Proc(id); p != nil {
			if d, err := ProcCPU(p.PID); err == nil {
				u.Workers += d
			}
			if d, err := ChildrenCPU(p.PID); err == nil {
				u.Programs += d
			}
		}
	}
	r.mu.Lock()
	az := r.az
	r.mu.Unlock()
	if az != nil {
		for _, s := range []devserver.Service{devserver.Blob, devserver.Queue} {
			if pid := az.PID(s); pid != 0 {
				if d, err := ProcCPU(pid); err == nil {
					u.Storage += d
				}
			}
		}
	}
	return u
}
