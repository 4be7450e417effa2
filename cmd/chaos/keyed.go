package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/harness/knownjobs"
	"github.com/mapagg/mapagg/internal/harness/rig"
	"github.com/mapagg/mapagg/internal/protocol"
)

// Keyed faults (issue 19): the matrix's faults on a keyed job, wordcount with "output":"blob"
// over a generated corpus. The output must equal jobstest.CheckKeyed's over the same corpus,
// record for record and partition for partition, and nothing but the outputs and the job's
// metadata may be left in storage.

const (
	keyedBlobs      = 8
	keyedWords      = 20_000
	keyedPartitions = 24
)

// keyedJob is the keyed wordcount; long gives more map tasks (a fault that hits late).
func keyedJob(long bool) func(Config) knownjobs.Job {
	return func(c Config) knownjobs.Job {
		shardBytes := int64(8 << 10)
		if long {
			shardBytes = 2 << 10
		}
		params := rig.KeyedWordcountParams(keyedPartitions, shardBytes)
		return knownjobs.Job{Type: "wordcount", Params: params, Check: func(res json.RawMessage) error { return keyedState.Check(params, res) }}
	}
}

func keyedFaults() []fault {
	short, long := keyedJob(false), keyedJob(true)
	return []fault{
		{name: "keyed-leader-kill-map", what: "keyed job: the leader is killed (SIGKILL) in the map phase and restarted", job: short, inject: injectKeyedLeaderKillMap},
		{name: "keyed-leader-kill-reduce", what: "keyed job: the leader and a follower are killed (SIGKILL) in the reduce phase and restarted", job: long, inject: injectKeyedKillReduce(true)},
		{name: "keyed-worker-kill-reduce", what: "keyed job: a follower is killed (SIGKILL) mid-reduce and restarted", job: long, inject: injectKeyedKillReduce(false)},
		{name: "keyed-nats-kill", what: "keyed job: nats-server is killed (kill -9) and restarted on its port and store", job: short, inject: injectNATSKill},
		{name: "keyed-blob-kill", what: "keyed job: azurite-blob is killed (kill -9) at least 6 s after the submit and restarted (a storage rollback)", job: long, inject: injectBlobKill, minAge: 6 * time.Second},
		{name: "keyed-blob-kill-reduce", what: "keyed job: azurite-blob is killed (kill -9) as the reduce phase starts (the map manifest and the last runs may be lost) and restarted", job: long, inject: injectKeyedBlobKillReduce},
		{name: "keyed-forged-result", what: "keyed job: well-formed map and reduce commits naming forged blobs are published by a plain NATS client", job: short, inject: injectKeyedForged, dead: map[string]int{"results": 2}},
	}
}

// isKeyedCluster: the cluster named name runs a keyed job (a keyed fault, or its reference).
func isKeyedCluster(name string) bool {
	return strings.HasPrefix(name, "keyed-") || strings.HasPrefix(name, "reference-wordcount")
}

// keyedState is the keyed job's checker: the cluster that runs it now (faults run one at a
// time) and the reference outputs.
var keyedState = &rig.KeyedChecker{}

// prepareKeyed writes the corpus into a keyed job's cluster (startCluster calls it for every cluster).
func prepareKeyed(ctx context.Context, name string, c *cluster.Cluster) error {
	if !isKeyedCluster(name) {
		return nil
	}
	if err := rig.WriteKeyedCorpus(ctx, c, keyedBlobs, keyedWords); err != nil {
		return err
	}
	keyedState.Use(c)
	return nil
}

func keyedPhase(ctx context.Context, f *faultRun, phase string, done int, within time.Duration) (*protocol.StatusRecord, error) {
	return rig.WaitPhase(ctx, f.c, f.id, phase, done, within)
}

func injectKeyedLeaderKillMap(ctx context.Context, f *faultRun) error {
	r, err := keyedPhase(ctx, f, protocol.PhaseMap, 1, 30*time.Second)
	if err != nil {
		return err
	}
	f.note("map phase %d/%d", r.PhaseDone, r.PhaseTotal)
	return injectLeaderKill(ctx, f)
}

// injectKeyedKillReduce kills, in the reduce phase, the leader and a follower (leader) or a
// follower alone, and restarts them.
func injectKeyedKillReduce(leader bool) func(context.Context, *faultRun) error {
	return func(ctx context.Context, f *faultRun) error {
		// Mid-reduce: a reduce task has stored an output. Not the status record's progress: the
		// reduce tasks may be one wave (as many as the slots), ending between two checkpoints.
		r, err := rig.WaitReduceOutput(ctx, f.c, f.id, 60*time.Second)
		if err != nil {
			return err
		}
		l, epoch, err := f.leader(ctx)
		if err != nil {
			return err
		}
		var victims []string
		if leader {
			victims = append(victims, l)
		}
		for _, id := range f.c.Running() {
			if id != l {
				victims = append(victims, id)
				break
			}
		}
		for _, id := range victims {
			if _, err := f.c.Signal(id, syscall.SIGKILL); err != nil {
				return err
			}
		}
		for _, id := range victims {
			if _, err := f.c.StartWorker(id); err != nil {
				return err
			}
		}
		f.healed = time.Now()
		f.note("reduce phase %d/%d: killed %s (leader %s, epoch %d)", r.PhaseDone, r.PhaseTotal, strings.Join(victims, ", "), l, epoch)
		if leader {
			ev, err := rig.WaitElected(ctx, f.c, epoch, 3*f.r.cfg.LeaseDuration)
			if err != nil {
				return err
			}
			f.note("%s elected (epoch %d) %.2f s after the kill", ev.Worker, ev.Epoch, ev.Time.Sub(f.healed).Seconds())
		}
		return nil
	}
}

// injectKeyedBlobKillReduce kills azurite-blob once the reduce phase has started: the map
// manifest and the last map runs are within the writes a kill -9 loses.
func injectKeyedBlobKillReduce(ctx context.Context, f *faultRun) error {
	r, err := keyedPhase(ctx, f, protocol.PhaseReduce, 0, 60*time.Second)
	if err != nil {
		return err
	}
	f.note("reduce phase %d/%d", r.PhaseDone, r.PhaseTotal)
	return injectBlobKill(ctx, f)
}

// injectKeyedForged publishes, without the cluster key, a map commit for the last map task and
// a reduce commit for partition 0, each naming a blob of a forged attempt. Unauthenticated, they
// must be dead-lettered, never committed.
func injectKeyedForged(ctx context.Context, f *faultRun) error {
	r, st := rig.KeyedRecord(ctx, f.c, f.id), rig.Status(ctx, f.c, f.id)
	if r == nil || st == nil || st.PlanEpoch == 0 || r.Phase != protocol.PhaseMap {
		return fmt.Errorf("cannot read the job's map phase and plan epoch")
	}
	if err := rig.PublishForgedCommits(f.c, f.id, st.PlanEpoch, r.PhaseTotal, keyedPartitions); err != nil {
		return err
	}
	f.note("published a forged map commit (task %d) and reduce commit (partition 0), plan epoch %d", r.PhaseTotal-1, st.PlanEpoch)
	return nil
}
