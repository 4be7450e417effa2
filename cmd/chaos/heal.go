package main

// What operators, storage and load break (issue 33): streams removed, the storage account
// wiped, submits retried after errors, a flood of job listings, a cold start after the whole
// cluster died. The cluster must rebuild what it needs without churning elections.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azqueue"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// healWindow is how long after a fault its elections are counted.
const healWindow = time.Minute

// healFaults are the faults of this file, in the order the run takes them.
func healFaults(sleepJob func(Config) knownjobs.Job) []fault {
	return []fault{
		{name: "streams-deleted", what: "every JetStream stream is deleted mid-job (an operator's `nats stream rm`): the job ends exact, a new job runs, at most 2 elections in the minute after", job: sleepJob, inject: injectStreamsDeleted},
		{name: "storage-wiped", what: "the jobs and lease containers and the job queue are deleted mid-job (the account wiped): at most 2 elections in the minute after, a new job runs, the lost job shows as failed with the cause", job: sleepJob, inject: injectStorageWiped,
			expectFailed: "state lost with the storage account"},
		{name: "idempotent-burst", what: "500 concurrent submits with idempotency keys, each retried once on any error: jobs = distinct keys", job: sleepJob, inject: injectIdempotentBurst},
		{name: "cold-start", what: "every worker is killed (SIGKILL) and one is started: it leads within 2 s (the dead lease is broken, fenced), then the others come back", job: sleepJob, inject: injectColdStart},
	}
}

// countElections fails f when more than most elections happened in the healWindow after from.
func countElections(ctx context.Context, f *faultRun, from time.Time, most int, what string) {
	sleep(ctx, time.Until(from.Add(healWindow)))
	n := rig.CountEvents(f.c, cluster.Elected, from, from.Add(healWindow), 0)
	f.changesSeen = &n
	f.note("%d elections in the %v after %s", n, healWindow, what)
	if n > most {
		f.fail(verdictFailed, fmt.Sprintf("%d elections in the %v after %s, want at most %d", n, healWindow, what, most))
	}
}

func injectStreamsDeleted(ctx context.Context, f *faultRun) error {
	js := rig.JetStream(f.c)
	names := f.c.Names()
	deleted := time.Now()
	for _, s := range []string{names.ShardStream(), names.ResultStream(), names.DeadStream()} {
		if err := js.DeleteStream(ctx, s); err != nil {
			return fmt.Errorf("delete stream %s: %w", s, err)
		}
	}
	f.healed = time.Now()
	f.note("deleted streams %s, %s, %s", names.ShardStream(), names.ResultStream(), names.DeadStream())
	if err := f.submitMore(ctx); err != nil {
		return fmt.Errorf("submit after the streams were deleted: %w", err)
	}
	countElections(ctx, f, deleted, 2, "the streams were deleted")
	for _, s := range []string{names.ShardStream(), names.ResultStream(), names.DeadStream()} {
		if _, err := js.Stream(ctx, s); err != nil {
			f.fail(verdictFailed, fmt.Sprintf("stream %s not recreated: %v", s, err))
		}
	}
	return nil
}

func injectStorageWiped(ctx context.Context, f *faultRun) error {
	lease := "leader"
	if ns := f.c.Options().Namespace; ns != "" {
		lease = ns + "-leader"
	}
	conn := f.r.rig.ConnStr()
	if az := f.c.Azurite(); az != nil {
		conn = az.ConnectionString()
	}
	qs, err := azqueue.NewServiceClientFromConnectionString(conn, nil)
	if err != nil {
		return fmt.Errorf("queue service client: %w", err)
	}
	wiped := time.Now()
	for _, name := range []string{f.c.JobsContainer(), lease} {
		if _, err := f.c.Blob().DeleteContainer(ctx, name, nil); err != nil {
			return fmt.Errorf("delete container %s: %w", name, err)
		}
	}
	if _, err := qs.DeleteQueue(ctx, f.c.QueueName(), nil); err != nil {
		return fmt.Errorf("delete queue %s: %w", f.c.QueueName(), err)
	}
	f.healed = time.Now()
	f.note("deleted containers %s and %s and queue %s", f.c.JobsContainer(), lease, f.c.QueueName())
	// A submit right after the wipe may meet the containers still missing: the client creates
	// what it writes to, so it must be accepted; retried once on an error all the same.
	sleep(ctx, 2*time.Second)
	if err := f.submitMore(ctx); err != nil {
		f.note("submit after the wipe: %v; again", err)
		if err := f.submitMore(ctx); err != nil {
			return fmt.Errorf("submit after the wipe: %w", err)
		}
	}
	countElections(ctx, f, wiped, 2, "the storage was wiped")
	return nil
}

func injectIdempotentBurst(ctx context.Context, f *faultRun) error {
	const n = 500
	j := knownjobs.Sleep(1, "1ms")
	run := fmt.Sprintf("%d", time.Now().UnixNano())
	var (
		mu      sync.Mutex
		acked   = map[string]string{}
		retried atomic.Int64
		wg      sync.WaitGroup
		errs    []string
	)
	started := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("chaos-%s-%d", run, i)
			submit := func() (string, error) {
				sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				return f.c.Client.Submit(sctx, j.Type, j.Params, client.WithIdempotencyKey(key))
			}
			id, err := submit()
			if err != nil {
				retried.Add(1)
				id, err = submit()
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
				return
			}
			acked[key] = id
		}()
	}
	wg.Wait()
	f.healed = time.Now()
	ids := map[string]bool{}
	for _, id := range acked {
		ids[id] = true
	}
	// Every job made since the burst began: its id sorts at or after the burst's first second.
	blobs, err := specsSince(ctx, f.c, started.Add(-time.Second))
	if err != nil {
		return err
	}
	made := 0
	for _, id := range blobs {
		if id != f.id {
			made++
		}
	}
	f.note("%d submits with keys, %d retried once, %d acknowledged (%d distinct ids), %d failed twice; %d jobs made", n, retried.Load(), len(acked), len(ids), len(errs), made)
	if len(ids) != len(acked) {
		f.fail(verdictWrong, fmt.Sprintf("%d keys acknowledged with %d distinct ids: two keys share a job", len(acked), len(ids)))
	}
	if made != len(ids) {
		f.fail(verdictWrong, fmt.Sprintf("%d jobs made for %d acknowledged keys", made, len(ids)))
	}
	for id := range ids {
		if !slices.Contains(blobs, id) {
			f.fail(verdictLost, "acknowledged job "+id+" does not exist")
			break
		}
	}
	if len(errs) > 0 {
		f.note("first error: %s", rig.Clip(errs[0], 200))
	}
	// The burst's jobs run to their end before the fault is judged: their queue messages are
	// the cluster's backlog, not something left behind.
	var (
		left  atomic.Int64
		sem   = make(chan struct{}, 16)
		drain sync.WaitGroup
	)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	began := time.Now()
	for id := range ids {
		drain.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; drain.Done() }()
			if _, err := f.c.Client.Wait(wctx, id, time.Second, nil); err != nil {
				left.Add(1)
			}
		}()
	}
	drain.Wait()
	f.note("the burst's %d jobs ended in %.1f s (%d not within 5 minutes)", len(ids), time.Since(began).Seconds(), left.Load())
	if left.Load() > 0 {
		f.fail(verdictStuck, fmt.Sprintf("%d of the burst's jobs did not end within 5 minutes", left.Load()))
	}
	return nil
}

func injectColdStart(ctx context.Context, f *faultRun) error {
	ids := f.c.Running()
	if len(ids) < 2 {
		return errors.New("cold-start needs at least two workers")
	}
	_, epoch, err := f.leader(ctx)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := f.c.Signal(id, syscall.SIGKILL); err != nil {
			return err
		}
	}
	sleep(ctx, 500*time.Millisecond)
	// Bring back one worker: it must break the dead term's lease within 2 s.
	back := time.Now()
	if _, err := f.c.StartWorker(ids[0]); err != nil {
		return fmt.Errorf("restart %s: %w", ids[0], err)
	}
	ev, err := rig.WaitElected(ctx, f.c, epoch, 3*f.r.cfg.LeaseDuration)
	if err != nil {
		return err
	}
	took := ev.Time.Sub(back)
	f.note("killed %s; %s started again and was elected (epoch %d) %.2f s later", strings.Join(ids, ", "), ids[0], ev.Epoch, took.Seconds())
	if took > 2*time.Second+time.Second { // a worker's own start-up (connect, key check) is the second
		f.fail(verdictSlow, fmt.Sprintf("the first worker back led %.2f s after it started, want about 2 s: it waited out the dead lease", took.Seconds()))
	}
	for _, id := range ids[1:] {
		if _, err := f.c.StartWorker(id); err != nil {
			return fmt.Errorf("restart %s: %w", id, err)
		}
	}
	f.healed = time.Now()
	return nil
}

// specsSince lists the ids of the jobs of c submitted at or after t (job ids begin with their
// submission second).
func specsSince(ctx context.Context, c *cluster.Cluster, t time.Time) ([]string, error) {
	from := t.UTC().Format("20060102-150405")
	pager := c.Blob().ServiceClient().NewContainerClient(c.JobsContainer()).NewListBlobsFlatPager(nil)
	var out []string
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, b := range page.Segment.BlobItems {
			if id, ok := strings.CutSuffix(*b.Name, "/spec.json"); ok && id >= from {
				out = append(out, id)
			}
		}
	}
	return out, nil
}
