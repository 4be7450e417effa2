package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// scStatus is issue 35's status figures: `worker status` on an idle cluster, and how soon a
// user polling `worker status --json` sees a SIGKILLed leader's successor.
const scStatus = "status"

// Status is what the status scenario measured. Each run is the CLI from exec to exit.
type Status struct {
	// Idle is `worker status` (table form) on an idle 3-worker cluster: wall seconds and the
	// command's own CPU-seconds (user + system), IdleRuns runs.
	Idle    rig.Dist `json:"idle_s"`
	IdleCPU rig.Dist `json:"idle_cpu_s"`
	// IdleJSON is `worker status --json`, the same way.
	IdleJSON rig.Dist `json:"idle_json_s"`
	// Successor is, for each of Kills SIGKILLs of the leader, the time from the kill to the end
	// of the first `worker status --json` (polled back to back) that names another leader.
	Successor  rig.Dist  `json:"successor_seen_s"`
	SuccessorS []float64 `json:"successor_seen_runs_s"`
	// Elected is, for the same kills, the time from the kill to the successor's lease stamp
	// (its "since"): the part of Successor that is the election's, not the command's.
	Elected rig.Dist `json:"elected_s"`
	Command string   `json:"command"`
}

const (
	statusIdleRuns = 20
	statusKills    = 6
)

// status measures the Status figures on a cluster of its own.
func (r *runner) status(ctx context.Context) error {
	c, err := r.rig.Start(ctx, rig.Spec{Name: "status", LeaseDuration: r.cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	st := &Status{Command: "worker status [--json]"}
	r.rep.Status = st
	// Warm-up: a few jobs listed, a worker's status cache filled.
	for range 3 {
		if _, _, _, err := statusRun(ctx, c, "status"); err != nil {
			return err
		}
	}
	r.log.Phase(fmt.Sprintf("idle status, %d runs of each form", statusIdleRuns), 2*statusIdleRuns)
	var walls, cpus, jsons []float64
	for range statusIdleRuns {
		w, cpu, _, err := statusRun(ctx, c, "status")
		if err != nil {
			return err
		}
		walls, cpus = append(walls, w), append(cpus, cpu)
		w, _, _, err = statusRun(ctx, c, "status", "--json")
		if err != nil {
			return err
		}
		jsons = append(jsons, w)
		r.log.Add(2)
	}
	r.log.Done()
	st.Idle, st.IdleCPU, st.IdleJSON = rig.Summarize(walls), rig.Summarize(cpus), rig.Summarize(jsons)
	r.log.Logf("idle status: p50 %.3fs (CPU %.3fs), --json p50 %.3fs", st.Idle.P50, st.IdleCPU.P50, st.IdleJSON.P50)

	r.log.Phase(fmt.Sprintf("successor seen by a polling status, %d kills", statusKills), statusKills)
	var elected []float64
	for range statusKills {
		seen, el, err := r.statusKill(ctx, c)
		if err != nil {
			return err
		}
		st.SuccessorS = append(st.SuccessorS, rig.Round3(seen))
		elected = append(elected, rig.Round3(el))
		r.log.Add(1)
	}
	r.log.Done()
	st.Successor, st.Elected = rig.Summarize(st.SuccessorS), rig.Summarize(elected)
	r.log.Logf("successor seen by `worker status --json`: median %.3fs of %d kills (elected median %.3fs)", st.Successor.P50, statusKills, st.Elected.P50)
	return nil
}

// statusKill SIGKILLs the leader while `worker status --json` runs back to back, and returns
// the seconds from the kill to the end of the first run naming another leader, and to that
// leader's stamp.
func (r *runner) statusKill(ctx context.Context, c *cluster.Cluster) (seen, elected float64, err error) {
	old, err := c.WaitLeader(ctx, func(*election.LeaderInfo) bool { return true })
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(time.Second) // the members hear the leader
	var mu sync.Mutex
	var killed time.Time
	found := make(chan error, 1)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			_, _, out, err := statusRun(pctx, c, "status", "--json")
			end := time.Now()
			if err != nil {
				continue // a run cut by the kill's moment; the next one counts
			}
			var v struct {
				Leader *struct {
					ID string `json:"id"`
				} `json:"leader"`
			}
			if json.Unmarshal(out, &v) != nil || v.Leader == nil || v.Leader.ID == old.ID {
				continue
			}
			mu.Lock()
			k := killed
			mu.Unlock()
			if k.IsZero() {
				continue
			}
			seen = end.Sub(k).Seconds()
			if l, err := c.Leader(pctx); err == nil && l != nil && l.ID != old.ID {
				elected = max(l.Since.Sub(k).Seconds(), 0) // the lease blob's stamp, not status's whole seconds
			}
			found <- nil
			return
		}
		found <- pctx.Err()
	}()
	time.Sleep(300 * time.Millisecond) // the poller runs
	mu.Lock()
	k, err := rig.Signal(c, old.ID, syscall.SIGKILL, false)
	killed = k.At
	mu.Unlock()
	if err != nil {
		return 0, 0, err
	}
	if err := <-found; err != nil {
		return 0, 0, fmt.Errorf("no successor of %s seen by worker status within 30 s: %w", old.ID, err)
	}
	if _, err := c.StartWorker(old.ID); err != nil {
		return 0, 0, fmt.Errorf("restart %s: %w", old.ID, err)
	}
	return seen, elected, nil
}

// statusRun runs the CLI with args and returns its wall seconds, its CPU-seconds and stdout.
func statusRun(ctx context.Context, c *cluster.Cluster, args ...string) (wall, cpu float64, out []byte, err error) {
	cmd := exec.CommandContext(ctx, c.Options().WorkerBin, args...)
	cmd.Env = c.WorkerEnv("cli")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, nil, fmt.Errorf("worker %v: %v: %s", args, err, stderr.String())
	}
	wall = time.Since(start).Seconds()
	cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return rig.Round3(wall), rig.Round3(cpu), stdout.Bytes(), nil
}
