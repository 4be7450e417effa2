package rig

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/election"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
)

// Idle is what a cluster costs while it has no job.
type Idle struct {
	Workers int `json:"workers"`
	// MachinePct is the CPU of the workers, NATS (in this process) and Azurite, as a share of
	// the whole machine (every core).
	MachinePct float64 `json:"machine_pct"`
	WorkersPct float64 `json:"workers_pct"` // the worker processes alone
	AzuritePct float64 `json:"azurite_pct"` // the Azurite blob and queue processes
	SelfPct    float64 `json:"self_pct"`    // this process: NATS in-process and the observers
	// NATSMsgsPerS counts messages into and out of the NATS server a second; per worker below.
	NATSMsgsPerS          float64 `json:"nats_msgs_per_s"`
	NATSMsgsPerWorkerPerS float64 `json:"nats_msgs_per_worker_per_s"`
	WindowS               float64 `json:"window_s"`
}

// natsMsgs is the shared NATS server's messages in plus out (0 when it runs elsewhere).
func (r *Rig) natsMsgs() int64 {
	r.mu.Lock()
	ns := r.ns
	r.mu.Unlock()
	if ns == nil {
		return 0
	}
	v, err := ns.Varz(&server.VarzOptions{})
	if err != nil {
		return 0
	}
	return v.InMsgs + v.OutMsgs
}

// azuriteCPU is the CPU time of the Azurite processes the rig started.
func (r *Rig) azuriteCPU() time.Duration {
	r.mu.Lock()
	az := r.az
	r.mu.Unlock()
	if az == nil {
		return 0
	}
	var total time.Duration
	for _, s := range []devserver.Service{devserver.Blob, devserver.Queue} {
		if pid := az.PID(s); pid != 0 {
			if d, err := ProcCPU(pid); err == nil {
				total += d
			}
		}
	}
	return total
}

// cpuMark is the CPU time used so far by a cluster's workers, the Azurite processes and this
// process (NATS in-process, the observers), at a moment.
type cpuMark struct {
	workers, azurite, self time.Duration
	at                     time.Time
}

func (r *Rig) markCPU(c *cluster.Cluster) cpuMark {
	self := SelfCPU()
	return cpuMark{workers: ClusterCPU(c) - self, azurite: r.azuriteCPU(), self: self, at: time.Now()}
}

// shares are the workers', Azurite's and this process's CPU from m to later, each as a
// percentage of the whole machine (cores).
func (m cpuMark) shares(later cpuMark, cores int) (workers, azurite, self float64) {
	wall := later.at.Sub(m.at).Seconds() * float64(max(cores, 1))
	pct := func(d time.Duration) float64 { return Round3(100 * d.Seconds() / wall) }
	return pct(later.workers - m.workers), pct(later.azurite - m.azurite), pct(later.self - m.self)
}

// MeasureIdle measures c, which runs no job, over window: CPU shares and NATS messages.
// Other clusters of the rig must be stopped, or their cost is counted too.
func (r *Rig) MeasureIdle(ctx context.Context, c *cluster.Cluster, window time.Duration, cores int) (Idle, error) {
	c0, m0 := r.markCPU(c), r.natsMsgs()
	if err := Sleep(ctx, window); err != nil {
		return Idle{}, err
	}
	c1, m1 := r.markCPU(c), r.natsMsgs()
	t0, t1 := c0.at, c1.at
	n := len(c.Running())
	in := Idle{Workers: n, WindowS: Round3(t1.Sub(t0).Seconds())}
	in.WorkersPct, in.AzuritePct, in.SelfPct = c0.shares(c1, cores)
	in.MachinePct = Round3(in.WorkersPct + in.AzuritePct + in.SelfPct)
	in.NATSMsgsPerS = Round3(float64(m1-m0) / t1.Sub(t0).Seconds())
	if n > 0 {
		in.NATSMsgsPerWorkerPerS = Round3(in.NATSMsgsPerS / float64(n))
	}
	return in, nil
}

// Takeover is one SIGKILL of the leader and the election that followed.
type Takeover struct {
	Workers int     `json:"workers"`
	S       float64 `json:"s"` // kill to the next election
	Breaks  int     `json:"breaks"`
}

// KillAndTime SIGKILLs c's leader, restarts it (the cluster keeps its size) and times the next election. It
// also counts the lease breaks the followers reported meanwhile.
func KillAndTime(ctx context.Context, c *cluster.Cluster, within time.Duration) (Takeover, error) {
	f, err := FailLeader(ctx, c, LeaderFault{Signal: syscall.SIGKILL, Restart: true, Within: within})
	if err != nil {
		return Takeover{}, err
	}
	_ = Sleep(ctx, 300*time.Millisecond) // late breaks, if any, are counted
	return Takeover{Workers: len(c.Running()), S: Round3(f.ToLeader.Seconds()), Breaks: CountEvents(c, string(election.EventBrokeLease), f.At, time.Now(), 0)}, nil
}

// Intake is a burst of tiny jobs from parallel submitters.
type Intake struct {
	Jobs       int     `json:"jobs"`
	Submitters int     `json:"submitters"`
	Exact      int     `json:"exact"`
	SubmitS    float64 `json:"submit_s"`     // first submit to the last submit's return
	LastAfterS float64 `json:"last_after_s"` // the last submit's return to the last job's end
	JobsPerS   float64 `json:"jobs_per_s"`   // jobs over first submit to last end
	Latency    Dist    `json:"latency_s"`    // submit to finished, per job
	// Wait is submit to started (the leader planned it), Run started to finished, per job.
	Wait Dist `json:"wait_s"`
	Run  Dist `json:"run_s"`
	// CPU during the burst (first submit to the last end), as a share of the whole machine.
	WorkersPct float64  `json:"workers_pct"`
	AzuritePct float64  `json:"azurite_pct"`
	SelfPct    float64  `json:"self_pct"` // this process: the submitters, NATS in-process
	Problems   []string `json:"problems,omitempty"`
}

// BurstIntake is BurstIntake with the CPU the cluster used meanwhile (cores: the machine's).
func (r *Rig) BurstIntake(ctx context.Context, c *cluster.Cluster, n, p int, timeout time.Duration, cores int) (Intake, error) {
	c0 := r.markCPU(c)
	in, err := BurstIntake(ctx, c, n, p, timeout)
	in.WorkersPct, in.AzuritePct, in.SelfPct = c0.shares(r.markCPU(c), cores)
	return in, err
}

// BurstIntake submits n one-shard sleep jobs from p submitters at once and waits for all.
func BurstIntake(ctx context.Context, c *cluster.Cluster, n, p int, timeout time.Duration) (Intake, error) {
	job := knownjobs.Sleep(1, "")
	type sub struct {
		id    string
		start time.Time
	}
	subs := make([]sub, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	first := time.Now()
	next := make(chan int)
	for range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				id, at, err := Submit(ctx, c, job)
				subs[i], errs[i] = sub{id, at}, err
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	lastSubmit := time.Now()
	for _, err := range errs {
		if err != nil {
			return Intake{}, err
		}
	}
	in := Intake{Jobs: n, Submitters: p, SubmitS: Round3(lastSubmit.Sub(first).Seconds())}
	var lat, wait, run []float64
	var lastEnd time.Time
	deadline := time.Now().Add(timeout)
	// The last submitted is waited for first: it ends about last, so the other reads (a status and
	// a result each) come after the burst instead of loading the storage it measures.
	for i := range subs {
		s := subs[len(subs)-1-i]
		st, ok := WaitEnd(ctx, c, s.id, deadline)
		o := Outcome{ID: s.id, Start: s.start}
		if !ok {
			in.Problems = append(in.Problems, fmt.Sprintf("job %s not finished within %v", s.id, timeout))
			continue
		}
		o = Judge(o, job, st)
		if !o.Exact {
			in.Problems = append(in.Problems, o.Problem)
			continue
		}
		in.Exact++
		lat = append(lat, Round3(o.Makespan.Seconds()))
		if st.StartedAt != nil && st.FinishedAt != nil {
			wait = append(wait, Round3(st.StartedAt.Sub(s.start).Seconds()))
			run = append(run, Round3(st.FinishedAt.Sub(*st.StartedAt).Seconds()))
		}
		if st.FinishedAt.After(lastEnd) {
			lastEnd = *st.FinishedAt
		}
	}
	for _, d := range [][]float64{lat, wait, run} {
		sort.Float64s(d)
	}
	in.Latency, in.Wait, in.Run = Summarize(lat), Summarize(wait), Summarize(run)
	if !lastEnd.IsZero() {
		in.LastAfterS = Round3(lastEnd.Sub(lastSubmit).Seconds())
		in.JobsPerS = Round3(float64(in.Exact) / lastEnd.Sub(first).Seconds())
	}
	return in, nil
}
