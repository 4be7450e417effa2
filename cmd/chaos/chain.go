package main

import (
	"context"
	"time"

	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
)

// Chain faults (issue 20): three built-in jobs, each after the previous and reading its output
// (wordcount → regroup by value → regroup into a total), with the leader SIGKILLed while each
// runs; and a schedule making that chain per tick, the leader killed during a chain's steps.
// The count → words histogram and the total must equal the corpus counted by the harness. The
// fault's own job is primes, so every map step is slowed.

func chainFaults() []fault {
	primes := func(c Config) knownjobs.Job { return c.primesJob() }
	return []fault{
		{name: "chain-leader-kill", what: "a chain of three jobs (--after, each reading the previous one's output): the leader is killed (SIGKILL) during each; the total is exact",
			job: primes, inject: injectChain},
		{name: "schedule-chain-leader-kill", what: "a schedule making that chain every 8 s: the leader is killed during a chain's second and third steps; each tick makes its three jobs once, each chain exact",
			job: primes, inject: injectScheduleChain},
	}
}

// writeChainCorpus writes the chain's input: small with --quick.
func writeChainCorpus(ctx context.Context, f *faultRun) error {
	blobs, words := 8, 6000
	if f.r.cfg.Quick {
		blobs, words = 4, 1500
	}
	return rig.WriteKeyedCorpus(ctx, f.c, blobs, words)
}

func injectScheduleChain(ctx context.Context, f *faultRun) error {
	if err := writeChainCorpus(ctx, f); err != nil {
		return err
	}
	r, err := rig.RunScheduleChain(ctx, f.c, "chaos-chain", rig.ChainSteps(4, 2<<10), rig.ClientAddChain(f.c), 8*time.Second, 4, f.r.cfg.Deadline)
	for _, n := range r.Notes {
		f.note("%s", n)
	}
	f.healed = time.Now()
	if err != nil {
		f.fail(verdictWrong, "schedule chain: "+err.Error())
		return nil
	}
	f.note("%d ticks, each a chain of 3 jobs made once, totals %v: exact", r.Ticks, r.Totals)
	return nil
}

func injectChain(ctx context.Context, f *faultRun) error {
	if err := writeChainCorpus(ctx, f); err != nil {
		return err
	}
	r, err := rig.RunChain(ctx, f.c, rig.ChainSteps(4, 2<<10), rig.ClientSubmit(f.c), true, 3*f.r.cfg.LeaseDuration)
	for _, n := range r.Notes {
		f.note("%s", n)
	}
	if err != nil {
		return err
	}
	f.healed = time.Now()
	total, err := rig.CheckChain(ctx, f.c, r.IDs, f.r.cfg.Deadline)
	if err != nil {
		f.fail(verdictWrong, "chain: "+err.Error())
		return nil
	}
	f.note("chain %v: %d words, exact", r.IDs, total)
	if left := rig.ChainLeftovers(ctx, f.c, r.IDs); len(left) > 0 {
		f.fail(verdictLeft, "chain: "+left[0])
	}
	return nil
}
