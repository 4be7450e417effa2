package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/coordinator"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/report"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
)

// million runs one job of MillionShards zero-duration shards at default settings. It samples the
// leader's resident memory and the shard stream's backlog throughout, and SIGKILLs the leader at
// 50 % (restarting it). The result must be exact.
func (r *runner) million(ctx context.Context) error {
	cfg := r.cfg
	c, err := r.rig.Start(ctx, rig.Spec{Name: "big", LeaseDuration: cfg.LeaseDuration})
	if err != nil {
		return err
	}
	defer r.rig.Stop(c)
	js, err := jetstream.New(c.Bus.Conn())
	if err != nil {
		return err
	}
	stream := protocol.NewNames(strings.ReplaceAll(c.Options().Namespace, "-", "")).ShardStream()
	m := &report.Million{Shards: cfg.MillionShards, Window: coordinator.DefaultConfig().DispatchWindow}
	r.rep.Million = m // the scenarios run one after another
	job := knownjobs.Sleep(cfg.MillionShards, "")
	r.log.Phase(fmt.Sprintf("big job (%d shards)", cfg.MillionShards), cfg.MillionShards)
	defer r.log.Done()
	jctx, cancel := context.WithTimeout(ctx, 2*cfg.JobTimeout)
	defer cancel()
	s, err := rig.Strike(jctx, c, job, 0.5) // the leader is killed at 50 % of the results on the wire
	if err != nil {
		return err
	}
	defer s.Close()
	id, smp, start := s.ID, s.Sampler, s.Start
	m.Job = id
	stopSampling := rig.Every(jctx, 100*time.Millisecond, func(ctx context.Context) { // the leader's memory and the backlog
		x := report.MemSample{AtS: rig.Round3(time.Since(start).Seconds())}
		x.Leader, x.RSSMiB = rig.LeaderRSS(ctx, c)
		if info, err := js.Stream(ctx, stream); err == nil {
			st := info.CachedInfo().State
			x.Backlog = st.Msgs
			m.MaxBacklogBytes = max(m.MaxBacklogBytes, st.Bytes)
		}
		if s, ok, _ := smp.Last(); ok {
			x.Done = s.Done
			r.log.Set(s.Done)
		}
		m.Samples = append(m.Samples, x)
		m.MaxLeaderRSSMiB = max(m.MaxLeaderRSSMiB, x.RSSMiB)
		m.MaxBacklog = max(m.MaxBacklog, x.Backlog)
		if x.RSSMiB > 0 {
			m.RSSSamples++
		}
	})
	defer stopSampling()
	s.Wait(jctx)
	var marks []report.Kill
	if s.Reached {
		fo, err := rig.FailLeader(jctx, c, rig.LeaderFault{Signal: syscall.SIGKILL, Restart: true, Within: 2 * cfg.JobTimeout})
		if err != nil && !errors.Is(err, rig.ErrNoElection) {
			return fmt.Errorf("big job: kill the leader: %w", err)
		}
		m.Killed, m.KilledAt = true, s.Seen
		mark := report.NewKill(fo.Kill, start, s.At.Done)
		mark.Leader, mark.Epoch = true, fo.Epoch
		marks = append(marks, mark)
		if err == nil {
			m.ToLeaderS = rig.Round3(fo.ToLeader.Seconds())
		}
		r.log.Logf("big job: killed leader %s with %d of %d results on the wire; new leader after %.2fs", fo.Worker, m.KilledAt, cfg.MillionShards, m.ToLeaderS)
	}
	o, err := r.awaitEnd(ctx, jctx, job, smp, "big", start)
	stopSampling()
	if err != nil {
		return err
	}
	m.Exact = o.Exact
	if o.Makespan > 0 {
		m.MakespanS = rig.Round3(o.Makespan.Seconds())
	}
	m.Timeline = report.NewTimeline(fmt.Sprintf("%d-shard job, leader killed at 50 %%", m.Shards), start, m.Shards, smp.Close(), nil, marks, rig.Elects(c, start, time.Now()), m.MakespanS)
	// Keep the report readable: every sample of a short job, about one a second of a long one.
	if len(m.Samples) > 600 {
		var thin []report.MemSample
		for i, s := range m.Samples {
			if i%10 == 0 {
				thin = append(thin, s)
			}
		}
		m.Samples = thin
	}
	r.log.Logf("big job: %d shards in %.1fs, exact %v; leader RSS max %.1f MiB (%d samples); shard stream backlog max %d messages (window %d shards)",
		m.Shards, m.MakespanS, m.Exact, m.MaxLeaderRSSMiB, m.RSSSamples, m.MaxBacklog, m.Window)
	return nil
}
