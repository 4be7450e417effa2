package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/harness/storecount"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/devserver"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/harness/sim"
)

// scThousand is issue 36's scenario: a simulated cluster (package sim) grown 3 → 100 → 300 →
// 1,000 members, many to a process, against one NATS server and one Azurite of its own.
const scThousand = "thousand"

// ThousandConfig sizes the thousand scenario.
type ThousandConfig struct {
	Sizes   []int // members, in growing order; default 3, 100, 300, 1000
	Kills   int   // crashes of the leader per size; default 9
	Jobs    int   // one-shard jobs submitted at each size from 8 submitters; default 100
	PerHost int   // members a host process runs (the leader and its successors run alone); default 100
	Window  time.Duration
}

func defaultThousand() ThousandConfig {
	return ThousandConfig{Sizes: []int{3, 100, 300, 1000}, Kills: 9, Jobs: 100, PerHost: 100, Window: 10 * time.Second}
}

func quickThousand() ThousandConfig {
	return ThousandConfig{Sizes: []int{3, 10}, Kills: 2, Jobs: 20, PerHost: 100, Window: 2 * time.Second}
}

// registerThousandFlags adds the scenario's flags to fs.
func registerThousandFlags(fs *flag.FlagSet, c *ThousandConfig) {
	fs.Func("thousand-sizes", "member counts the thousand scenario grows through, ascending (default "+rig.JoinList(c.Sizes)+")", func(s string) error {
		sizes, err := rig.ParseList(s, "a number of members from 3 to 5000", strconv.Atoi, func(n int) bool { return n >= 3 && n <= 5000 })
		if err == nil && !slices.IsSorted(sizes) {
			err = fmt.Errorf("%q: give the sizes in ascending order (the cluster grows)", s)
		}
		c.Sizes = sizes
		return err
	})
	fs.IntVar(&c.Kills, "thousand-kills", c.Kills, "crashes of the leader per size in the thousand scenario (their median is compared)")
	fs.IntVar(&c.Jobs, "thousand-jobs", c.Jobs, "one-shard jobs the thousand scenario submits at each size from 8 submitters (0: none)")
	fs.IntVar(&c.PerHost, "thousand-per-host", c.PerHost, "simulated members a process of the thousand scenario runs")
	fs.DurationVar(&c.Window, "thousand-window", c.Window, "idle measuring window of each size in the thousand scenario")
}

// Validate refuses settings that cannot produce a meaningful run.
func (c ThousandConfig) Validate() error {
	switch {
	case len(c.Sizes) == 0:
		return errors.New("--thousand-sizes: give at least one size")
	case c.Kills < 1 || c.Kills > 50:
		return fmt.Errorf("--thousand-kills %d: use 1 to 50", c.Kills)
	case c.Jobs < 0 || c.Jobs > 10_000:
		return fmt.Errorf("--thousand-jobs %d: use 0 to 10,000", c.Jobs)
	case c.PerHost < 1 || c.PerHost > 1000:
		return fmt.Errorf("--thousand-per-host %d: use 1 to 1,000", c.PerHost)
	case c.Window < time.Second:
		return fmt.Errorf("--thousand-window %v: at least 1s", c.Window)
	}
	return nil
}

// Thousand is the thousand scenario's report. Its figures keep the names of issue 36.
type Thousand struct {
	Sizes []ThousandSize `json:"sizes"`
	// RequestsPerTinyJob is the storage requests (blob and queue) of one one-shard job, submit
	// included, measured at the first size: every member's storage client and the submitter's
	// count them (storecount.Counting). Blob and queue apart below, and each kind of request.
	RequestsPerTinyJob float64            `json:"requests_per_tiny_job"`
	BlobPerTinyJob     float64            `json:"blob_requests_per_tiny_job"`
	QueuePerTinyJob    float64            `json:"queue_requests_per_tiny_job"`
	TinyJobRequests    map[string]float64 `json:"tiny_job_requests"` // per job, by request ("<job>" for its id)
	Note               string             `json:"note,omitempty"`
}

// ThousandSize is one size's figures.
type ThousandSize struct {
	Members int `json:"members"`
	Hosts   int `json:"hosts"`
	// Idle, over the window: NATS messages in and out of the server, a member a second; the
	// followers' CPU (their processes', the leader's excluded) a member, in ms a second.
	IdleNATSMsgsPerMemberS float64 `json:"idle_nats_msgs_per_member_s"`
	IdleCPUMsPerMemberS    float64 `json:"idle_cpu_ms_per_member_s"`
	// The leader's process (it runs alone): CPU in % of one core, and resident memory.
	LeaderCPUPct float64 `json:"leader_cpu_pct"`
	LeaderRSSMiB float64 `json:"leader_rss_mib"`
	// Storage requests of every member, a second, idle: the lease blob's and all.
	LeaseBlobRequestsPerS float64 `json:"lease_blob_requests_per_s"`
	StorageRequestsPerS   float64 `json:"storage_requests_per_s"`
	AzuriteCPUPct         float64 `json:"azurite_cpu_pct"` // of one core
	NATSCPUPct            float64 `json:"nats_cpu_pct"`    // this process: NATS in-process and the load test
	// Takeover: crash of the leader → next elected, each, and their median.
	TakeoverS       []float64 `json:"takeover_s"`
	TakeoverMedianS float64   `json:"takeover_median_s"`
	LeaseBreaks     int       `json:"lease_breaks"`
	// Tiny-job intake: jobs submitted from 8 submitters, first submit to last end.
	Jobs       int     `json:"jobs"`
	JobsPerS   float64 `json:"jobs_per_s"`
	LastAfterS float64 `json:"last_after_s"`
	Exact      bool    `json:"exact"`
	GrowS      float64 `json:"grow_s"` // time to start the members added at this size
	// What a member's start costs in storage requests (all, and the lease blob's), over the
	// members added at this size (the growth's renewals included).
	StartRequestsPerMember  float64 `json:"start_requests_per_member"`
	StartLeaseBlobPerMember float64 `json:"start_lease_blob_requests_per_member"`
}

// thousand runs the scenario.
func (r *runner) thousand(ctx context.Context) error {
	tc := r.cfg.Thousand
	th := &Thousand{}
	defer func() {
		r.mu.Lock()
		r.rep.Thousand = th
		r.mu.Unlock()
	}()
	limit := sim.RaiseFileLimit() // before Azurite starts: it inherits it
	need := uint64(tc.Sizes[len(tc.Sizes)-1])*2 + 1024
	if limit < need {
		r.log.Logf("thousand: open-file limit %d, about %d wanted at %d members (NATS holds one socket a member): raise the hard limit (ulimit -Hn) if connections fail", limit, need, tc.Sizes[len(tc.Sizes)-1])
	}
	dir := filepath.Join(r.cfg.Dir, scThousand)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	start := time.Now()
	bin, err := sim.BuildHost(dir)
	if err != nil {
		return err
	}
	r.log.Logf("thousand: built the member host in %v", time.Since(start).Round(time.Millisecond))
	connStr, natsURL := r.cfg.ConnStr, r.cfg.NATSURL
	var az *devserver.AzuriteServer
	if connStr == "" { // an Azurite of its own: what earlier scenarios left does not count
		if az, err = devserver.StartAzurite(filepath.Join(dir, "azurite")); err != nil {
			return err
		}
		defer az.Stop()
		connStr = az.ConnectionString()
	}
	var ns *server.Server
	if natsURL == "" {
		if ns, err = devserver.StartNATS(filepath.Join(dir, "nats")); err != nil {
			return err
		}
		defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
		natsURL = ns.ClientURL()
	} else {
		th.Note = "attached to a NATS server: its message counts are not read"
	}
	c, err := sim.Start(ctx, sim.Options{Dir: dir, HostBin: bin, ConnStr: connStr, NATSURL: natsURL, Namespace: r.rig.RunID() + "-thousand",
		LeaseDuration: r.cfg.LeaseDuration, PerHost: tc.PerHost, Logf: r.log.Logf})
	if err != nil {
		return err
	}
	defer c.Stop()
	for i, n := range tc.Sizes {
		t0, was := time.Now(), c.Size()
		g0, err := c.Counts()
		if err != nil {
			return err
		}
		if err := c.Grow(ctx, n); err != nil {
			return fmt.Errorf("grow to %d members: %w", n, err)
		}
		sz := ThousandSize{Members: n, Hosts: len(c.HostPIDs()), GrowS: rig.Round3(time.Since(t0).Seconds()), Exact: true}
		if g1, err := c.Counts(); err == nil && n > was {
			d := g1.Sub(g0)
			sz.StartRequestsPerMember = rig.Round3(float64(d.Total(nil)) / float64(n-was))
			sz.StartLeaseBlobPerMember = rig.Round3(float64(d.Total(c.LeaseBlob)) / float64(n-was))
		}
		r.log.Logf("thousand: %d members in %d processes (grown in %.1fs; a start cost %.2f storage requests, %.2f of them on the lease blob)", n, sz.Hosts, sz.GrowS, sz.StartRequestsPerMember, sz.StartLeaseBlobPerMember)
		settle := 5*time.Second + time.Duration(n)*10*time.Millisecond
		if r.cfg.Quick {
			settle = time.Second
		}
		if err := rig.Sleep(ctx, settle); err != nil {
			return err
		}
		if err := thousandIdle(ctx, c, ns, az, tc.Window, &sz); err != nil {
			return err
		}
		r.log.Logf("thousand: %d idle members: %.2f NATS msgs a member a second, %.3f ms CPU a member a second; leader %.1f %% of a core, %.0f MiB; lease blob %.2f requests/s (all storage %.2f/s)",
			n, sz.IdleNATSMsgsPerMemberS, sz.IdleCPUMsPerMemberS, sz.LeaderCPUPct, sz.LeaderRSSMiB, sz.LeaseBlobRequestsPerS, sz.StorageRequestsPerS)
		if tc.Jobs > 0 {
			if err := r.thousandIntake(ctx, c, tc.Jobs, &sz, th, i == 0); err != nil {
				return err
			}
		}
		for k := 1; k <= tc.Kills; k++ {
			to, err := c.CrashLeader(ctx, 30*time.Second)
			if err != nil {
				return err
			}
			sz.TakeoverS = append(sz.TakeoverS, rig.Round3(to.S))
			sz.LeaseBreaks += to.Breaks
			r.log.Logf("thousand: %d members, crash %d of the leader (%s): new leader in %.3fs (%d lease breaks)", n, k, to.Victim, to.S, to.Breaks)
			_ = rig.Sleep(ctx, time.Second)
		}
		sz.TakeoverMedianS = rig.Summarize(sz.TakeoverS).P50
		th.Sizes = append(th.Sizes, sz)
	}
	return nil
}

// thousandIdle measures the idle cluster over window.
func thousandIdle(ctx context.Context, c *sim.Cluster, ns *server.Server, az *devserver.AzuriteServer, window time.Duration, sz *ThousandSize) error {
	leader, ok := c.Leader()
	if !ok {
		return errors.New("no leader")
	}
	lpid, _ := c.HostOf(leader.Worker)
	pids := c.HostPIDs()
	cpu := func() (leader, followers, azurite, self time.Duration) {
		for _, pid := range pids {
			d, _ := rig.ProcCPU(pid)
			if pid == lpid {
				leader += d
			} else {
				followers += d
			}
		}
		if az != nil {
			for _, s := range []devserver.Service{devserver.Blob, devserver.Queue} {
				if pid := az.PID(s); pid != 0 {
					d, _ := rig.ProcCPU(pid)
					azurite += d
				}
			}
		}
		return leader, followers, azurite, rig.SelfCPU()
	}
	msgs := func() int64 {
		if ns == nil {
			return 0
		}
		v, err := ns.Varz(&server.VarzOptions{})
		if err != nil {
			return 0
		}
		return v.InMsgs + v.OutMsgs
	}
	counts0, err := c.Counts()
	if err != nil {
		return err
	}
	l0, f0, a0, s0 := cpu()
	m0, t0 := msgs(), time.Now()
	if err := rig.Sleep(ctx, window); err != nil {
		return err
	}
	l1, f1, a1, s1 := cpu()
	m1, el := msgs(), time.Since(t0).Seconds()
	counts1, err := c.Counts()
	if err != nil {
		return err
	}
	if l, _ := c.Leader(); l.Epoch != leader.Epoch {
		return fmt.Errorf("the leader changed while the cluster was idle (epoch %d → %d)", leader.Epoch, l.Epoch)
	}
	n := float64(sz.Members)
	pct := func(d time.Duration) float64 { return rig.Round3(100 * d.Seconds() / el) }
	sz.IdleNATSMsgsPerMemberS = rig.Round3(float64(m1-m0) / el / n)
	sz.IdleCPUMsPerMemberS = rig.Round3(1000 * (f1 - f0).Seconds() / el / max(n-1, 1))
	sz.LeaderCPUPct, sz.AzuriteCPUPct, sz.NATSCPUPct = pct(l1-l0), pct(a1-a0), pct(s1-s0)
	if rss, err := rig.ProcRSS(lpid); err == nil {
		sz.LeaderRSSMiB = rig.Round3(float64(rss) / (1 << 20))
	}
	d := counts1.Sub(counts0)
	sz.LeaseBlobRequestsPerS = rig.Round3(float64(d.Total(c.LeaseBlob)) / el)
	sz.StorageRequestsPerS = rig.Round3(float64(d.Total(nil)) / el)
	return nil
}

// thousandIntake submits jobs one-shard jobs from 8 submitters, waits for them (by the
// members' events, so the waiting costs no storage request) and judges each. At the first size
// it also counts what a tiny job costs in storage requests.
func (r *runner) thousandIntake(ctx context.Context, c *sim.Cluster, jobs int, sz *ThousandSize, th *Thousand, count bool) error {
	job := knownjobs.Sleep(1, "")
	before, err := c.Counts()
	if err != nil {
		return err
	}
	c.Submits.Reset()
	// Every member runs this release, so the submitters put each spec into its queue message
	// (client.Client.InlineSpec), as a deployment does once its roll is done (docs/deploy.md):
	// the leader does not read the spec back.
	c.Client.InlineSpec = true
	defer func() { c.Client.InlineSpec = false }()
	ids := make([]string, jobs)
	errs := make([]error, jobs)
	first := time.Now()
	next := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				ids[i], errs[i] = c.Client.Submit(ctx, job.Type, job.Params)
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	lastSubmit := time.Now()
	submits := c.Submits.Counts()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	want := make(map[string]bool, jobs)
	for _, id := range ids {
		want[id] = true
	}
	var lastEnd time.Time
	deadline := time.Now().Add(r.cfg.JobTimeout)
	for len(want) > 0 {
		for _, e := range c.Events() {
			if e.Kind == string(coordinator.EventJobFinished) && want[e.Job] {
				delete(want, e.Job)
				if e.At.After(lastEnd) {
					lastEnd = e.At
				}
			}
		}
		if time.Now().After(deadline) {
			r.errorf("thousand: %d members: %d of %d tiny jobs not finished within %v", sz.Members, len(want), jobs, r.cfg.JobTimeout)
			sz.Exact = false
			break
		}
		if err := rig.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	// The leader's sweeper deletes the ended jobs' markers once intake has been idle for 0.5 s.
	_ = rig.Sleep(ctx, 2*time.Second)
	after, err := c.Counts()
	if err != nil {
		return err
	}
	exact := 0
	for _, id := range ids {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		st, err := c.Client.Wait(wctx, id, rig.PollEvery, nil)
		cancel()
		o := rig.Outcome{ID: id, Start: first}
		if err == nil {
			o = rig.Judge(o, job, st)
		} else {
			o.Problem = fmt.Sprintf("job %s: %v", id, err)
		}
		r.account(o)
		if o.Exact {
			exact++
		} else {
			r.errorf("thousand: %s", o.Problem)
		}
	}
	sz.Jobs, sz.Exact = jobs, sz.Exact && exact == jobs
	if !lastEnd.IsZero() {
		sz.LastAfterS = rig.Round3(lastEnd.Sub(lastSubmit).Seconds())
		sz.JobsPerS = rig.Round3(float64(jobs) / lastEnd.Sub(first).Seconds())
	}
	r.log.Logf("thousand: %d members: %d tiny jobs, %.1f jobs/s, the last ended %.2fs after the last submit (%d exact)", sz.Members, jobs, sz.JobsPerS, sz.LastAfterS, exact)
	if count {
		// Every request of the members and the submitters but the lease's (renewals go on
		// whether jobs run or not).
		d := after.Sub(before)
		d.Add(submits)
		per := map[string]float64{}
		var blob, queue float64
		for req, k := range d {
			if req.Container == c.Names().LeaseContainer {
				continue
			}
			v := float64(k) / float64(jobs)
			per[tinyJobKind(req, ids)] += v
			if req.Service == "queue" {
				queue += v
			} else {
				blob += v
			}
		}
		for k, v := range per {
			per[k] = rig.Round3(v)
		}
		th.TinyJobRequests, th.BlobPerTinyJob, th.QueuePerTinyJob = per, rig.Round3(blob), rig.Round3(queue)
		th.RequestsPerTinyJob = rig.Round3(blob + queue)
		r.log.Logf("thousand: a tiny job costs %.2f storage requests (%.2f blob, %.2f queue), submit included", th.RequestsPerTinyJob, blob, queue)
	}
	return nil
}

// tinyJobKind names a request with the job's id replaced by <job> (and a queue message's id by
// <msg>, an ended marker's time by <t>).
func tinyJobKind(r storecount.Request, ids []string) string {
	b := r.Blob
	switch {
	case strings.HasPrefix(b, "messages/"):
		b = "messages/<msg>"
	case strings.HasPrefix(b, "ended/"):
		b = "ended/<t>-<state>-<job>"
	default:
		for _, id := range ids {
			if strings.Contains(b, id) {
				b = strings.Replace(b, id, "<job>", 1)
				break
			}
		}
	}
	r.Blob, r.Container = b, "<"+map[bool]string{true: "queue", false: "container"}[r.Service == "queue"]+">"
	return r.String()
}

// writeThousand is the thousand section of the Markdown summary.
func writeThousand(w io.Writer, th *Thousand) {
	if th == nil {
		return
	}
	fmt.Fprintf(w, "\n### A thousand members (simulated, many to a process)\n\n| members | processes | idle NATS msgs a member a second | idle CPU ms a member a second | leader CPU %% of a core | leader RSS MiB | lease blob requests/s | all storage requests/s | takeover median s (max) | lease breaks | tiny jobs/s | last ends after last submit s | exact |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range th.Sizes {
		d := rig.Summarize(s.TakeoverS)
		fmt.Fprintf(w, "| %d | %d | %.2f | %.3f | %.1f | %.0f | %.2f | %.2f | %.3f (%.3f) | %d | %.1f | %.2f | %v |\n", s.Members, s.Hosts, s.IdleNATSMsgsPerMemberS, s.IdleCPUMsPerMemberS,
			s.LeaderCPUPct, s.LeaderRSSMiB, s.LeaseBlobRequestsPerS, s.StorageRequestsPerS, d.P50, d.Max, s.LeaseBreaks, s.JobsPerS, s.LastAfterS, s.Exact)
	}
	if th.RequestsPerTinyJob > 0 {
		fmt.Fprintf(w, "\nA tiny job (one shard, submit included) costs %.2f storage requests: %.2f blob, %.2f queue. By request, a job:\n\n", th.RequestsPerTinyJob, th.BlobPerTinyJob, th.QueuePerTinyJob)
		for _, k := range slices.Sorted(maps.Keys(th.TinyJobRequests)) {
			fmt.Fprintf(w, "- %s: %.2f\n", k, th.TinyJobRequests[k])
		}
	}
	if th.Note != "" {
		fmt.Fprintf(w, "\n%s\n", th.Note)
	}
}

// thousandTargets judges issue 36's targets: idle NATS messages a member the same at the
// largest size as at 100 (within 20 %), the takeover median at the largest size ≤ 1 s and
// within 1.5× the smallest's, lease-blob requests a second independent of N, every answer
// exact, a tiny job within 6 storage requests.
func thousandTargets(cfg *Config, rep *Report) []Target {
	th := rep.Thousand
	if th == nil || len(th.Sizes) == 0 {
		return nil
	}
	speed := !cfg.Quick && runtime.NumCPU() >= 2
	var ts []Target
	add := func(name, want string, value float64, unit string, met, judged bool, note string) {
		ts = append(ts, Target{Name: name, Want: want, Value: value, Unit: unit, Met: met, Judged: judged, Note: note})
	}
	small, big := th.Sizes[0], th.Sizes[len(th.Sizes)-1]
	// The reference is 100 members (or the smallest size of at least 30): at 3 the leader's
	// beats to its successors are most of every member's messages.
	var ref ThousandSize
	for _, s := range th.Sizes {
		if s.Members == 100 || ref.Members == 0 && s.Members >= 30 {
			ref = s
		}
	}
	if ref.Members > 0 && big.Members > ref.Members && ref.IdleNATSMsgsPerMemberS > 0 {
		ratio := rig.Round3(big.IdleNATSMsgsPerMemberS / ref.IdleNATSMsgsPerMemberS)
		add(fmt.Sprintf("idle NATS messages a member a second, %d ÷ %d members", big.Members, ref.Members), "≤ 1.20", ratio, "×", ratio <= 1.2 && ratio >= 0.8, speed,
			fmt.Sprintf("%.2f against %.2f", big.IdleNATSMsgsPerMemberS, ref.IdleNATSMsgsPerMemberS))
	}
	add(fmt.Sprintf("crash of the leader → new leader, median of %d, %d members", len(big.TakeoverS), big.Members), "≤ 1 s", big.TakeoverMedianS, " s", big.TakeoverMedianS <= 1, speed, "")
	if big.Members > small.Members && small.TakeoverMedianS > 0 {
		ratio := rig.Round3(big.TakeoverMedianS / small.TakeoverMedianS)
		add(fmt.Sprintf("takeover median, %d ÷ %d members", big.Members, small.Members), "≤ 1.5", ratio, "×", ratio <= 1.5, speed && len(big.TakeoverS) >= 3,
			fmt.Sprintf("%.3f s against %.3f s", big.TakeoverMedianS, small.TakeoverMedianS))
	}
	if big.Members > small.Members {
		// Renewals are one a second; allow half a request a second of noise over a window.
		met := big.LeaseBlobRequestsPerS <= small.LeaseBlobRequestsPerS*1.2+0.5
		add(fmt.Sprintf("lease-blob requests a second, %d against %d members", big.Members, small.Members), "independent of N", big.LeaseBlobRequestsPerS, "/s", met, true,
			fmt.Sprintf("%.2f/s at %d members", small.LeaseBlobRequestsPerS, small.Members))
	}
	exact := true
	for _, s := range th.Sizes {
		exact = exact && s.Exact
	}
	add("thousand scenario: every answer exact", "all", map[bool]float64{true: 1}[exact], "", exact, true, "")
	if th.RequestsPerTinyJob > 0 {
		add("storage requests per tiny job (submit included)", "≤ 6", th.RequestsPerTinyJob, "", th.RequestsPerTinyJob <= 6, true,
			fmt.Sprintf("blob %.2f, queue %.2f", th.BlobPerTinyJob, th.QueuePerTinyJob))
	}
	return ts
}
