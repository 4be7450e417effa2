package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

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
		return knownjobs.Job{Type: "wordcount", Params: params, Check: func(res json.RawMessage) error { return keyedState.check(params, res) }}
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
		{name: "keyed-forged-result", what: "keyed job: well-formed map and reduce commits naming forged blobs are published by a plain NATS client", job: short, inject: injectKeyedForged, dead: map[string]int{"results": 2}},
	}
}

// isKeyedCluster: the cluster named name runs a keyed job (a keyed fault, or its reference).
func isKeyedCluster(name string) bool {
	return strings.HasPrefix(name, "keyed-") || strings.HasPrefix(name, "reference-wordcount")
}

// keyedState is the cluster that runs the keyed job now (faults run one at a time) and the
// reference output of each job over the corpus.
var keyedState = &keyedRun{want: map[string][]string{}}

type keyedRun struct {
	mu   sync.Mutex
	c    *cluster.Cluster
	want map[string][]string
}

// prepareKeyed writes the corpus into a keyed job's cluster (startEnv calls it for every cluster).
func prepareKeyed(ctx context.Context, name string, c *cluster.Cluster) error {
	if !isKeyedCluster(name) {
		return nil
	}
	if err := rig.WriteKeyedCorpus(ctx, c, keyedBlobs, keyedWords); err != nil {
		return err
	}
	keyedState.mu.Lock()
	keyedState.c = c
	keyedState.mu.Unlock()
	return nil
}

// check compares a keyed job's output with the reference.
func (k *keyedRun) check(params, res json.RawMessage) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c == nil {
		return fmt.Errorf("no keyed cluster")
	}
	want, ok := k.want[string(params)]
	if !ok {
		var err error
		if want, err = rig.KeyedReference(k.c, params); err != nil {
			return fmt.Errorf("reference output (jobstest.CheckKeyed): %w", err)
		}
		k.want[string(params)] = want
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := rig.KeyedOutput(ctx, k.c, res)
	if err != nil {
		return err
	}
	if err := rig.SameOutput(got, want); err != nil {
		return err
	}
	var m protocol.OutputManifest
	_ = json.Unmarshal(res, &m)
	id, _, _ := strings.Cut(m.Partitions[0].Blob, "/")
	var left []string
	for until := time.Now().Add(15 * time.Second); time.Now().Before(until); time.Sleep(250 * time.Millisecond) {
		if left, err = rig.KeyedLeftovers(ctx, k.c, id, res); err == nil && len(left) == 0 {
			return nil
		}
	}
	return fmt.Errorf("output exact, but left in storage: %s", clip(strings.Join(left, ", "), 300))
}

// keyedPhase waits for the job to be in phase with at least done of its tasks done.
func keyedPhase(ctx context.Context, f *faultRun, phase string, done int, within time.Duration) (*protocol.StatusRecord, error) {
	until := time.Now().Add(within)
	for {
		st := f.e.status(ctx, f.id)
		if st != nil && st.State.Terminal() {
			return nil, fmt.Errorf("job ended (%s) before phase %s", st.State, phase)
		}
		if r := keyedRecord(ctx, f); r != nil && r.Phase == phase && r.PhaseDone >= done {
			return r, nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return nil, fmt.Errorf("job not in phase %s with %d done within %v", phase, done, within)
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func keyedRecord(ctx context.Context, f *faultRun) *protocol.StatusRecord {
	p, err := f.e.c.Client.Store.Props(ctx, protocol.CheckpointBlob(f.id))
	if err != nil {
		return nil
	}
	r, _ := protocol.DecodeStatusRecord(p.Meta)
	return r
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
		r, err := keyedPhase(ctx, f, protocol.PhaseReduce, 1, 60*time.Second)
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
		for _, id := range f.e.c.Running() {
			if id != l {
				victims = append(victims, id)
				break
			}
		}
		for _, id := range victims {
			if _, err := f.e.c.Signal(id, syscall.SIGKILL); err != nil {
				return err
			}
		}
		for _, id := range victims {
			if _, err := f.e.c.StartWorker(id); err != nil {
				return err
			}
		}
		f.healed = time.Now()
		f.note("reduce phase %d/%d: killed %s (leader %s, epoch %d)", r.PhaseDone, r.PhaseTotal, strings.Join(victims, ", "), l, epoch)
		if leader {
			ev, err := f.waitElected(ctx, epoch, 3*f.e.r.cfg.LeaseDuration)
			if err != nil {
				return err
			}
			f.note("%s elected (epoch %d) %.2f s after the kill", ev.Worker, ev.Epoch, ev.Time.Sub(f.healed).Seconds())
		}
		return nil
	}
}

// injectKeyedForged publishes, without the cluster key, a map commit for the last map task and
// a reduce commit for partition 0, each naming a blob of a forged attempt. Unauthenticated, they
// must be dead-lettered, never committed.
func injectKeyedForged(ctx context.Context, f *faultRun) error {
	r := keyedRecord(ctx, f)
	st := f.e.status(ctx, f.id)
	if r == nil || st == nil || st.PlanEpoch == 0 || r.Phase != protocol.PhaseMap {
		return fmt.Errorf("cannot read the job's map phase and plan epoch")
	}
	maps := r.PhaseTotal
	offsets := make([]int64, keyedPartitions+1)
	mc, _ := json.Marshal(protocol.MapCommit{Blob: protocol.MapRunBlob(f.id, maps-1, 7), Offsets: offsets})
	rc, _ := json.Marshal(protocol.ReduceCommit{Partition: 0, Blob: protocol.OutputBlob(f.id, 0, 7)})
	nc, err := nats.Connect(f.e.c.NATSURL, nats.Name("chaos-forger"))
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, m := range []protocol.ResultMsg{
		{Job: f.id, Index: maps - 1, Epoch: st.PlanEpoch, Attempt: 1, Worker: "w1", Partial: mc},
		{Job: f.id, Index: maps, Epoch: st.PlanEpoch, Attempt: 1, Worker: "w1", Partial: rc},
	} {
		data, err := m.Encode()
		if err != nil {
			return err
		}
		if err := nc.Publish(f.e.c.Names().ResultSubject(f.id), data); err != nil {
			return err
		}
	}
	f.note("published a forged map commit (task %d) and reduce commit (partition 0), plan epoch %d", maps-1, st.PlanEpoch)
	return nc.Flush()
}
