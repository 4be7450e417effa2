package main

// The trust faults: silent partitions through a fault proxy, forged control messages and
// misconfigured workers. Each counts the leader changes it caused (the lease blob's epoch) and
// fails with verdictChurn when they differ from what the fault allows.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/harness/faultproxy"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// verdictChurn: the fault changed the leader more often than it may.
const verdictChurn = "CHURN"

// cutFor is how long a partition lasts.
func (f *faultRun) cutFor() time.Duration {
	if f.e.r.cfg.Quick {
		return 8 * time.Second
	}
	return 20 * time.Second
}

// extraProc is a worker this file starts itself (behind a proxy, or misconfigured), outside the
// cluster's own set; it is stopped by its pid before the fault ends.
type extraProc struct {
	id   string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// startExtra starts a worker with the cluster's environment plus env (later values win).
func (f *faultRun) startExtra(id string, env ...string) (*extraProc, error) {
	dir := filepath.Join(f.e.r.cfg.Dir, f.e.name)
	logPath := filepath.Join(dir, id+".extra.log")
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(f.e.c.Options().WorkerBin, "run")
	cmd.Env = append(f.e.c.WorkerEnv(id), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	p := &extraProc{id: id, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); lf.Close(); close(p.done) }()
	f.e.r.rig.TrackPID(cmd.Process.Pid, "worker "+id)
	return p, nil
}

// stop ends the process (SIGTERM, SIGKILL after 15 s).
func (p *extraProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *extraProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// proxied starts worker id whose NATS connection goes through a fault proxy of its own, and
// waits until it announces itself.
func (f *faultRun) proxied(ctx context.Context, id string) (*extraProc, *faultproxy.Proxy, error) {
	u, err := url.Parse(f.e.c.NATSURL)
	if err != nil {
		return nil, nil, err
	}
	px, err := faultproxy.New(u.Host)
	if err != nil {
		return nil, nil, err
	}
	p, err := f.startExtra(id, "NATS_URL=nats://"+px.Addr())
	if err != nil {
		_ = px.Close()
		return nil, nil, err
	}
	if err := f.waitMember(ctx, id, 60*time.Second); err != nil {
		p.stop()
		_ = px.Close()
		return nil, nil, err
	}
	return p, px, nil
}

func (f *faultRun) waitMember(ctx context.Context, id string, within time.Duration) error {
	until := time.Now().Add(within)
	for f.e.c.HTTPAddr(id) == "" {
		if time.Now().After(until) || ctx.Err() != nil {
			return fmt.Errorf("worker %s did not announce itself within %v", id, within)
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return nil
}

// readyz is the /readyz status of the worker at addr (0: no answer).
func readyz(addr string) int {
	cl := http.Client{Timeout: 3 * time.Second}
	resp, err := cl.Get("http://" + addr + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

func waitReady(ctx context.Context, addr string, want int, within time.Duration) (time.Duration, bool) {
	start := time.Now()
	for time.Since(start) < within && ctx.Err() == nil {
		if readyz(addr) == want {
			return time.Since(start), true
		}
		sleep(ctx, 100*time.Millisecond)
	}
	return time.Since(start), false
}

// changes checks the leader changes since epoch0 against want.
func (f *faultRun) changes(ctx context.Context, epoch0 uint64, want int) {
	_, epoch, err := f.leader(ctx)
	if err != nil {
		f.fail(verdictError, err.Error())
		return
	}
	n := int(epoch - epoch0)
	f.changesSeen = &n
	f.note("%d leader changes (epochs %d → %d)", n, epoch0, epoch)
	if n != want {
		f.fail(verdictChurn, fmt.Sprintf("%d leader changes, want %d", n, want))
	}
}

// injectFollowerCut cuts a follower silently from NATS for cutFor: no leader may change; the
// follower reports not ready during the cut and ready again after it.
func injectFollowerCut(ctx context.Context, f *faultRun) error {
	p, px, err := f.proxied(ctx, "wcut")
	if err != nil {
		return err
	}
	defer px.Close()
	defer p.stop()
	addr := f.e.c.HTTPAddr("wcut")
	sleep(ctx, 2*time.Second) // it hears the leader
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	px.Blackhole()
	f.note("follower wcut cut off silently for %v", f.cutFor())
	if took, ok := waitReady(ctx, addr, http.StatusServiceUnavailable, 5*time.Second); ok {
		f.note("wcut not ready %.2f s into the cut", took.Seconds())
	} else {
		f.fail(verdictWrong, "a cut-off follower kept reporting ready")
	}
	sleep(ctx, f.cutFor()-time.Second)
	px.Heal()
	f.healed = time.Now()
	if took, ok := waitReady(ctx, addr, http.StatusOK, 15*time.Second); ok {
		f.note("wcut ready again %.2f s after the heal", took.Seconds())
	} else {
		f.fail(verdictWrong, "wcut not ready 15 s after the heal")
	}
	sleep(ctx, 2*time.Second)
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectLeaderCut makes a proxied worker the leader, then cuts it silently from NATS for
// cutFor: exactly one leader change, and the cut-off worker does not lead again.
func injectLeaderCut(ctx context.Context, f *faultRun) error {
	p, px, err := f.proxied(ctx, "wcut")
	if err != nil {
		return err
	}
	defer px.Close()
	defer p.stop()
	if err := f.handTo(ctx, "wcut"); err != nil {
		return err
	}
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	px.Blackhole()
	cut := time.Now()
	f.note("leader wcut (epoch %d) cut off silently for %v", epoch0, f.cutFor())
	if ev, err := f.waitElected(ctx, epoch0, f.cutFor()); err == nil {
		f.note("%s elected (epoch %d) %.2f s into the cut", ev.Worker, ev.Epoch, ev.Time.Sub(cut).Seconds())
	} else {
		f.fail(verdictNotDeposed, "the cut-off leader was not replaced during the cut")
	}
	sleep(ctx, time.Until(cut.Add(f.cutFor())))
	px.Heal()
	f.healed = time.Now()
	sleep(ctx, 5*time.Second)
	if l, _, err := f.leader(ctx); err == nil && l == "wcut" {
		f.fail(verdictChurn, "the cut-off leader took the lease back")
	}
	f.changes(ctx, epoch0, 1)
	return nil
}

// handTo makes worker id the leader: the cluster's other workers pause (SIGSTOP), the leader
// stops gracefully (its release pokes id), the others continue and the old leader restarts.
func (f *faultRun) handTo(ctx context.Context, id string) error {
	old, epoch, err := f.leader(ctx)
	if err != nil {
		return err
	}
	var paused []string
	for _, w := range f.e.c.Running() {
		if w != old {
			if pr := f.e.c.Proc(w); pr != nil && pr.Signal(syscall.SIGSTOP) == nil {
				paused = append(paused, w)
			}
		}
	}
	_, err = f.e.c.Signal(old, syscall.SIGTERM)
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, werr := f.e.c.WaitLeader(lctx, func(l *election.LeaderInfo) bool { return l.ID == id && l.Epoch > epoch })
	cancel()
	for _, w := range paused {
		_ = f.e.c.Proc(w).Signal(syscall.SIGCONT)
	}
	if _, serr := f.e.c.StartWorker(old); serr != nil {
		return serr
	}
	if err != nil || werr != nil {
		return fmt.Errorf("hand the lease to %s: %v %v", id, err, werr)
	}
	sleep(ctx, 3*time.Second) // everyone hears the new leader's beats
	return nil
}

// injectLeaderQueueCut makes a worker whose link to the job queue goes through a fault proxy the
// leader, cuts that link silently for 40 s and submits a second job meanwhile: the leader must
// hand over (exactly one change) and the second job must run and end exact.
func injectLeaderQueueCut(ctx context.Context, f *faultRun) error {
	conn := f.e.c.ConnStr
	i := strings.Index(conn, "QueueEndpoint=http://")
	if i < 0 {
		return fmt.Errorf("no queue endpoint in the connection string")
	}
	rest := conn[i+len("QueueEndpoint=http://"):]
	hostport := rest[:strings.Index(rest, "/")]
	px, err := faultproxy.New(hostport)
	if err != nil {
		return err
	}
	defer px.Close()
	p, err := f.startExtra("wq", "AZURE_STORAGE_CONNECTION_STRING="+strings.Replace(conn, "QueueEndpoint=http://"+hostport, "QueueEndpoint=http://"+px.Addr(), 1))
	if err != nil {
		return err
	}
	defer p.stop()
	if err := f.waitMember(ctx, "wq", 60*time.Second); err != nil {
		return err
	}
	if err := f.handTo(ctx, "wq"); err != nil {
		return err
	}
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	cut := 40 * time.Second
	px.Blackhole()
	start := time.Now()
	f.note("leader wq (epoch %d) cut from the job queue for %v", epoch0, cut)
	id, at, err := f.e.submit(ctx, f.job)
	if err != nil {
		return err
	}
	f.more = append(f.more, extraJob{id: id, start: at})
	if ev, err := f.waitElected(ctx, epoch0, cut); err == nil {
		f.note("%s elected (epoch %d) %.1f s into the cut", ev.Worker, ev.Epoch, ev.Time.Sub(start).Seconds())
	} else {
		f.fail(verdictNotDeposed, "the leader cut from the queue did not hand over")
	}
	sleep(ctx, time.Until(start.Add(cut)))
	px.Heal()
	f.healed = time.Now()
	sleep(ctx, 3*time.Second)
	f.changes(ctx, epoch0, 1)
	return nil
}

// forgedBeats is how many forged heartbeats injectForgedHeartbeat publishes.
const forgedBeats = 20

// injectForgedHeartbeat publishes well-formed heartbeats of ever higher epochs from a plain NATS
// client without the cluster key: no leader may change; each is dead-lettered.
func injectForgedHeartbeat(ctx context.Context, f *faultRun) error {
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	nc, err := nats.Connect(f.e.c.NATSURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	subject := f.e.c.Names().Control(bus.CtlHeartbeat)
	for i := range forgedBeats {
		data, err := bus.EncodeBeat(election.Beat{Epoch: epoch0 + 1000 + uint64(i), Identity: "forger", Seq: uint64(i + 1), Sent: time.Now()})
		if err != nil {
			return err
		}
		if err := nc.Publish(subject, data); err != nil {
			return err
		}
		sleep(ctx, 250*time.Millisecond)
	}
	f.healed = time.Now()
	sleep(ctx, 4*time.Second) // well past the suspicion timeout
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectWrongKey starts a worker with another cluster key mid-job: it must take itself out (not
// ready, never leads, processes nothing), and the job ends exact.
func injectWrongKey(ctx context.Context, f *faultRun) error {
	k, err := bus.GenerateKey()
	if err != nil {
		return err
	}
	_, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	p, err := f.startExtra("wkey", "CLUSTER_KEY="+k.Encode())
	if err != nil {
		return err
	}
	defer p.stop()
	f.healed = time.Now()
	if err := f.waitMember(ctx, "wkey", 60*time.Second); err != nil {
		return err
	}
	if _, ok := waitReady(ctx, f.e.c.HTTPAddr("wkey"), http.StatusServiceUnavailable, 15*time.Second); !ok {
		f.fail(verdictWrong, "a wrong-key worker reports ready")
	}
	// It stays while the job runs to its end.
	f.e.waitEnd(ctx, f.id, time.Now().Add(f.e.r.cfg.Deadline))
	log := p.logText()
	switch {
	case !strings.Contains(log, `"msg":"wrong cluster key"`):
		f.fail(verdictWrong, "the wrong-key worker did not say what is wrong")
	case strings.Contains(log, `"msg":"elected"`):
		f.fail(verdictChurn, "the wrong-key worker led")
	case strings.Contains(log, `"msg":"processing shards"`):
		f.fail(verdictWrong, "the wrong-key worker consumed shards")
	default:
		f.note("wkey refused to lead and consume, and said why")
	}
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectDuplicateID starts a second process with a live follower's id: it must exit naming the
// id, and no leader may change.
func injectDuplicateID(ctx context.Context, f *faultRun) error {
	leader, epoch0, err := f.leader(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(f.e.c.Running(), func(id string) bool { return id != leader })
	if i < 0 {
		return fmt.Errorf("no follower to copy the id of")
	}
	dup := f.e.c.Running()[i]
	p, err := f.startExtra(dup)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.stop()
		f.fail(verdictWrong, fmt.Sprintf("a second process with id %s did not exit within 30 s", dup))
	}
	f.healed = time.Now()
	if log := p.logText(); p.err == nil || !strings.Contains(log, fmt.Sprintf(`worker id \"%s\" is used by a live process`, dup)) {
		f.fail(verdictWrong, fmt.Sprintf("the second %s: exit %v, and its log does not name the id", dup, p.err))
	} else {
		f.note("the second %s exited (%v) naming the id", dup, p.err)
	}
	sleep(ctx, 2*time.Second)
	f.changes(ctx, epoch0, 0)
	return nil
}

// injectJetStreamFull makes the results stream refuse every message (out of space) for a while,
// then frees it, without restarting nats-server: the job must finish exact (publish failures
// use up no attempts), and the workers report not ready meanwhile.
func injectJetStreamFull(ctx context.Context, f *faultRun) error {
	full := 150 * time.Second
	if f.e.r.cfg.Quick {
		full = 10 * time.Second
	}
	s, err := f.e.jetStream().Stream(ctx, f.e.c.Names().ResultStream())
	if err != nil {
		return err
	}
	orig := s.CachedInfo().Config
	limited := orig
	limited.MaxBytes, limited.Discard = 1, jetstream.DiscardNew
	if _, err := f.e.jetStream().UpdateStream(ctx, limited); err != nil {
		return err
	}
	f.note("results stream full (1 byte, discard new) for %v", full)
	unready, announced := 0, 0
	until := time.Now().Add(full)
	for time.Now().Before(until) && ctx.Err() == nil {
		sleep(ctx, 2*time.Second)
		unready, announced = 0, 0
		for _, id := range f.e.c.Running() {
			if addr := f.e.c.HTTPAddr(id); addr != "" && readyz(addr) == http.StatusServiceUnavailable {
				unready++
			}
		}
		for _, m := range f.e.c.Members() { // what `worker workers` and the dashboard show
			if slices.ContainsFunc(m.Problems, func(p string) bool { return strings.HasPrefix(p, "results: ") }) {
				announced++
			}
		}
	}
	if _, err := f.e.jetStream().UpdateStream(context.WithoutCancel(ctx), orig); err != nil {
		return fmt.Errorf("free the results stream: %w", err)
	}
	f.healed = time.Now()
	f.note("%d workers not ready at the end of the outage (%d announced it); space freed without a NATS restart", unready, announced)
	if unready == 0 {
		f.fail(verdictWrong, "no worker reported the full stream in /readyz")
	}
	if announced == 0 {
		f.fail(verdictWrong, "no worker announced the full stream as a problem (worker workers, dashboard)")
	}
	return nil
}

// injectReplay records the job's shard and result messages (those in the shards stream and those
// a plain NATS client sees from the fault on), lets the job finish, restarts nats-server (which forgets the acknowledged
// messages' ids) and publishes every recorded message again, verbatim (genuine MACs): no shard may
// run again and the job's result may not be written again.
func injectReplay(ctx context.Context, f *faultRun) error {
	nc, err := nats.Connect(f.e.c.NATSURL)
	if err != nil {
		return err
	}
	names := f.e.c.Names()
	var captured []*nats.Msg
	var mu sync.Mutex
	for _, subj := range []string{names.ShardSubject(f.id), names.ResultSubject(f.id)} {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) {
			mu.Lock()
			captured = append(captured, m)
			mu.Unlock()
		}); err != nil {
			nc.Close()
			return err
		}
	}
	// The shards dispatched already wait in the shards stream: read them as they are stored.
	if ss, err := f.e.jetStream().Stream(ctx, names.ShardStream()); err == nil {
		info := ss.CachedInfo()
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
			raw, err := ss.GetMsg(ctx, seq)
			if err != nil || !strings.HasSuffix(raw.Subject, "."+f.id) {
				continue
			}
			m := nats.NewMsg(raw.Subject)
			m.Header, m.Data = raw.Header, raw.Data
			mu.Lock()
			captured = append(captured, m)
			mu.Unlock()
		}
	}
	st, ended := f.e.waitEnd(ctx, f.id, time.Now().Add(f.e.r.cfg.Deadline))
	nc.Close()
	if st == nil || !ended || st.State != jobs.StateSucceeded {
		return fmt.Errorf("the job did not succeed before the replay (%s)", describe(st))
	}
	_, etag, err := f.e.jobStore().Get(ctx, protocol.ResultBlob(f.id))
	if err != nil {
		return fmt.Errorf("read the result: %w", err)
	}
	executed := f.sumMetric("mapagg_shards_executed_total")
	np := f.e.c.NATSProcess()
	if err := np.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	if err := np.Restart(); err != nil {
		return err
	}
	sleep(ctx, 3*time.Second) // the workers reconnect
	// Past the duplicate window: shrink it to 1 s for the replay (restored after).
	var restore []jetstream.StreamConfig
	for _, name := range []string{names.ShardStream(), names.ResultStream()} {
		s, err := f.e.jetStream().Stream(ctx, name)
		if err != nil {
			return err
		}
		c := s.CachedInfo().Config
		restore = append(restore, c)
		c.Duplicates = time.Second
		if _, err := f.e.jetStream().UpdateStream(ctx, c); err != nil {
			return fmt.Errorf("shrink the duplicate window: %w", err)
		}
	}
	defer func() {
		for _, c := range restore {
			_, _ = f.e.jetStream().UpdateStream(context.WithoutCancel(ctx), c)
		}
	}()
	sleep(ctx, 2*time.Second)
	mu.Lock()
	msgs := captured
	mu.Unlock()
	published, dups := 0, 0
	for _, m := range msgs {
		r := nats.NewMsg(m.Subject)
		r.Header, r.Data = m.Header, m.Data
		if ack, err := f.e.jetStream().PublishMsg(ctx, r); err == nil {
			published++
			if ack.Duplicate {
				dups++
			}
		}
	}
	f.healed = time.Now()
	f.note("nats-server restarted, duplicate window passed; %d of %d recorded shard and result messages published again (%d taken as duplicates)", published, len(msgs), dups)
	sleep(ctx, 8*time.Second)
	if n := f.sumMetric("mapagg_shards_executed_total") - executed; n != 0 {
		f.fail(verdictWrong, fmt.Sprintf("%.0f shards of the ended job ran again", n))
	}
	replayed := f.sumMetric("mapagg_shards_replayed_total")
	f.note("%.0f replayed shards dropped before running", replayed)
	if replayed == 0 && published > dups {
		f.fail(verdictWrong, "no replayed shard reached a worker: the fault did not replay")
	}
	if _, etag2, err := f.e.jobStore().Get(ctx, protocol.ResultBlob(f.id)); err != nil || etag2 != etag {
		f.fail(verdictWrong, fmt.Sprintf("the ended job's result was written again (%v)", err))
	} else {
		f.note("result.json untouched")
	}
	return nil
}

// sumMetric adds a counter over the running workers' /metrics.
func (f *faultRun) sumMetric(name string) float64 {
	var sum float64
	cl := http.Client{Timeout: 3 * time.Second}
	for _, id := range f.e.c.Running() {
		addr := f.e.c.HTTPAddr(id)
		if addr == "" {
			continue
		}
		resp, err := cl.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				if x, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					sum += x
				}
			}
		}
	}
	return sum
}

// burstJobs is how many jobs injectBurstKill submits.
const burstJobs = 20

// injectBurstKill submits a burst of small jobs and kills the leader (SIGKILL) at once: every job
// must start (its first checkpoint) within 5 s of the next election, and end exact.
func injectBurstKill(ctx context.Context, f *faultRun) error {
	small := knownjobs.Sleep(4, "50ms")
	var ids []string
	for range burstJobs {
		id, err := f.e.c.Client.Submit(ctx, small.Type, small.Params)
		if err != nil {
			return err
		}
		ids = append(ids, id)
	}
	_, epoch, err := f.killLeader(ctx)
	if err != nil {
		return err
	}
	f.healed = time.Now()
	ev, err := f.waitElected(ctx, epoch, 3*f.e.r.cfg.LeaseDuration)
	if err != nil {
		return err
	}
	f.note("%d jobs submitted, leader killed; %s elected %.2f s later", burstJobs, ev.Worker, ev.Time.Sub(f.healed).Seconds())
	var latest time.Duration
	for _, id := range ids {
		st, ended := f.e.waitEnd(ctx, id, time.Now().Add(f.e.r.cfg.Deadline))
		switch {
		case st == nil || !ended:
			f.fail(verdictStuck, fmt.Sprintf("burst job %s did not end", id))
			continue
		case st.State != jobs.StateSucceeded || small.Check(st.Result) != nil:
			f.fail(verdictWrong, fmt.Sprintf("burst job %s ended %s, not exact", id, st.State))
			continue
		}
		data, _, err := f.e.jobStore().Get(ctx, protocol.CheckpointBlob(id))
		if err != nil {
			continue
		}
		if cp, err := protocol.DecodeCheckpoint(data); err == nil {
			latest = max(latest, cp.StartedAt.Sub(ev.Time))
		}
	}
	f.note("the last burst job started %.2f s after the election", latest.Seconds())
	if latest > 5*time.Second {
		f.fail(verdictSlow, fmt.Sprintf("a burst job started %.1f s after the election, want within 5 s", latest.Seconds()))
	}
	return nil
}

// jetStream is the cluster's JetStream, over its client's NATS connection.
func (e *env) jetStream() jetstream.JetStream {
	js, err := jetstream.New(e.c.Bus.Conn())
	if err != nil { // only for a nil connection or bad options: neither happens here
		panic(fmt.Sprintf("jetstream: %v", err))
	}
	return js
}

// jobStore is the cluster's jobs container.
func (e *env) jobStore() *store.Container { return store.New(e.c.Blob(), e.c.JobsContainer()) }
