package main

import (
	"context"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// runJob submits job, shows its progress as phase, waits for it and accounts its rig.Outcome.
func (r *runner) runJob(ctx context.Context, c *cluster.Cluster, job knownjobs.Job, phase string, shards int) (rig.Outcome, error) {
	r.log.Phase(phase, shards)
	id, start, err := rig.Submit(ctx, c, job)
	if err != nil {
		return rig.Outcome{}, err
	}
	o, err := rig.Await(ctx, c, job, id, start, r.cfg.JobTimeout, func(s client.Status) { r.log.Set(s.ShardsDone) })
	r.log.Done()
	if err != nil {
		return o, err
	}
	r.account(o)
	return o, nil
}

// awaitEnd waits, within jctx, for job id to end, judges it (lost when it did not end in time;
// what names the run in that problem) and accounts for it.
func (r *runner) awaitEnd(ctx, jctx context.Context, c *cluster.Cluster, job knownjobs.Job, smp *rig.Sampler, what, id string, start time.Time) (rig.Outcome, error) {
	last, ended, err := smp.WaitFor(jctx, func(s rig.Sample) bool { return s.State.Terminal() })
	if err != nil && ctx.Err() != nil {
		return rig.Outcome{}, ctx.Err()
	}
	o := rig.Outcome{ID: id, Start: start}
	if !ended {
		o.Lost, o.Problem = true, fmt.Sprintf("%s job %s not finished (%s, %d of %d merged)", what, id, last.State, last.Done, last.Total)
	} else {
		st, err := rig.Final(ctx, c, id)
		if err != nil {
			return rig.Outcome{}, err
		}
		o = rig.Judge(o, job, st)
	}
	r.account(o)
	return o, nil
}
