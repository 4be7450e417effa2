package main

import (
	"context"
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

// awaitEnd judges the sampled job (rig.Sampler.Await) and accounts for it.
func (r *runner) awaitEnd(ctx, jctx context.Context, job knownjobs.Job, smp *rig.Sampler, what string, start time.Time) (rig.Outcome, error) {
	o, err := smp.Await(ctx, jctx, job, start, what)
	if err == nil {
		r.account(o)
	}
	return o, err
}
