package rig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/jobs/jobstest"
	"github.com/mapagg/mapagg/store"
)

// Keyed jobs in tools: a generated corpus in a cluster's storage, the reference output of a
// keyed wordcount over it (jobstest.CheckKeyed, in-process) and the cluster's output read back
// from its output blobs.

// KeyedCorpusContainer holds the generated corpus in a cluster's storage.
const KeyedCorpusContainer = "keyed-corpus"

// WriteKeyedCorpus stores blobs blobs of text (in/NN.txt) with about words distinct words, each
// line a few words of a deterministic sequence, in c's storage.
func WriteKeyedCorpus(ctx context.Context, c *cluster.Cluster, blobs, words int) error {
	data := store.New(c.Blob(), KeyedCorpusContainer)
	if err := data.Ensure(ctx); err != nil {
		return err
	}
	for b := range blobs {
		var buf bytes.Buffer
		for i := range 3 * words / blobs {
			k := (i*7919 + b*104729) % words
			fmt.Fprintf(&buf, "k%d ünï%d", k, (i+b)%words)
			if i%9 == 8 {
				buf.WriteByte('\n')
			} else {
				buf.WriteByte(' ')
			}
		}
		if _, err := data.Put(ctx, fmt.Sprintf("in/%02d.txt", b), buf.Bytes(), store.Cond{}); err != nil {
			return fmt.Errorf("write the corpus: %w", err)
		}
	}
	return nil
}

// KeyedWordcountParams are the parameters of a keyed wordcount over the corpus.
func KeyedWordcountParams(partitions int, shardBytes int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"container":%q,"prefix":"in/","output":"blob","partitions":%d,"shard_bytes":%d}`,
		KeyedCorpusContainer, partitions, shardBytes))
}

// KeyedReference is the output a keyed wordcount with params must give over c's corpus, from
// jobstest.CheckKeyed (which also checks the job's contract), one line per record as the output
// blobs hold them ({"key":K,"value":V}), partition after partition.
func KeyedReference(c *cluster.Cluster, params json.RawMessage) ([]string, error) {
	wordcount, err := builtin.Registry().Lookup("wordcount")
	if err != nil {
		return nil, err
	}
	recs, err := jobstest.CheckKeyed(jobs.KeyedForm(wordcount), store.NewEnv(c.Blob()), string(params))
	if err != nil {
		return nil, err
	}
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = fmt.Sprintf(`%d {"key":%s,"value":%s}`, r.Partition, r.Key, r.Value)
	}
	return out, nil
}

// KeyedOutput reads a keyed job's output as KeyedReference lists it, from its result (an
// OutputManifest) and its output blobs in c's storage.
func KeyedOutput(ctx context.Context, c *cluster.Cluster, result json.RawMessage) ([]string, error) {
	var probe protocol.OutputManifest
	if err := json.Unmarshal(result, &probe); err != nil || len(probe.Partitions) == 0 {
		return nil, fmt.Errorf("result %s is not an output manifest", Clip(string(result), 200))
	}
	id, _, _ := strings.Cut(probe.Partitions[0].Blob, "/")
	m, err := protocol.DecodeOutputManifest(id, result)
	if err != nil {
		return nil, err
	}
	jobsC := store.New(c.Blob(), c.JobsContainer())
	var out []string
	for _, p := range m.Partitions {
		rc, err := jobsC.Streams().Get(ctx, p.Blob)
		if err != nil {
			return nil, err
		}
		err = m.ReadRecords(rc, func(key, value []byte) error {
			out = append(out, fmt.Sprintf(`%d {"key":%s,"value":%s}`, p.Partition, key, value))
			return nil
		})
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", p.Blob, err)
		}
	}
	return out, nil
}

// SameOutput says how got differs from want, or nil.
func SameOutput(got, want []string) error {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Errorf("output record %d is %q, want %q", i, Clip(got[i], 120), Clip(want[i], 120))
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%d output records, want %d", len(got), len(want))
	}
	return nil
}

// KeyedLeftovers lists what job id left in c's jobs container besides its metadata and the
// outputs its manifest names (nil result: none are kept).
func KeyedLeftovers(ctx context.Context, c *cluster.Cluster, id string, result json.RawMessage) ([]string, error) {
	keep := map[string]bool{protocol.SpecBlob(id): true, protocol.CheckpointBlob(id): true, protocol.ResultBlob(id): true}
	if m, err := protocol.DecodeOutputManifest(id, result); err == nil {
		for _, p := range m.Partitions {
			keep[p.Blob] = true
		}
	}
	blobs, err := store.New(c.Blob(), c.JobsContainer()).List(ctx, id+"/")
	if err != nil {
		return nil, err
	}
	var left []string
	for _, b := range blobs {
		if !keep[b.Name] {
			left = append(left, b.Name)
		}
	}
	return left, nil
}

// KeyedRecord reads job id's status record (a HEAD), nil while it cannot be read.
func KeyedRecord(ctx context.Context, c *cluster.Cluster, id string) *protocol.StatusRecord {
	p, err := c.Client.Store.Props(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return nil
	}
	r, _ := protocol.DecodeStatusRecord(p.Meta)
	return r
}

// WaitPhase waits until keyed job id is in phase with at least done of its tasks done.
func WaitPhase(ctx context.Context, c *cluster.Cluster, id, phase string, done int, within time.Duration) (*protocol.StatusRecord, error) {
	until := time.Now().Add(within)
	for {
		r := KeyedRecord(ctx, c, id)
		if r != nil && r.State.Terminal() {
			return nil, fmt.Errorf("job ended (%s) before phase %s", r.State, phase)
		}
		if r != nil && r.Phase == phase && r.PhaseDone >= done {
			return r, nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return nil, fmt.Errorf("job not in phase %s with %d done within %v", phase, done, within)
		}
		_ = Sleep(ctx, 20*time.Millisecond)
	}
}

// WaitReduceOutput waits until keyed job id is in its reduce phase and a reduce task has stored
// an output blob: reduce tasks are running (some may have committed), whatever the status
// record's progress says (it is written by time, and one wave of reduce tasks may end between
// two checkpoints).
func WaitReduceOutput(ctx context.Context, c *cluster.Cluster, id string, within time.Duration) (*protocol.StatusRecord, error) {
	until := time.Now().Add(within)
	if _, err := WaitPhase(ctx, c, id, protocol.PhaseReduce, 0, within); err != nil {
		return nil, err
	}
	jobsC := store.New(c.Blob(), c.JobsContainer())
	for {
		r := KeyedRecord(ctx, c, id)
		if r != nil && r.State.Terminal() {
			return nil, fmt.Errorf("job ended (%s) before a reduce task stored an output", r.State)
		}
		if outs, err := jobsC.List(ctx, protocol.OutputPrefix(id)); err == nil && len(outs) > 0 && r != nil {
			return r, nil
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return nil, fmt.Errorf("no reduce output of job %s within %v", id, within)
		}
		_ = Sleep(ctx, 10*time.Millisecond)
	}
}

// PublishForgedCommits publishes from a plain NATS client (without the cluster key) a map
// commit for map task maps-1 and a reduce commit for partition 0 of keyed job id, each naming a
// blob of a forged attempt, with the job's plan epoch.
func PublishForgedCommits(c *cluster.Cluster, id string, planEpoch uint64, maps, partitions int) error {
	mc, _ := json.Marshal(protocol.MapCommit{Blob: protocol.MapRunBlob(id, maps-1, 7), Offsets: make([]int64, partitions+1)})
	rc, _ := json.Marshal(protocol.ReduceCommit{Partition: 0, Blob: protocol.OutputBlob(id, 0, 7)})
	nc, err := nats.Connect(c.NATSURL, nats.Name("forger"))
	if err != nil {
		return err
	}
	defer nc.Close()
	for _, m := range []protocol.ResultMsg{
		{Kind: protocol.KindKeyed, Job: id, Index: maps - 1, Epoch: planEpoch, Attempt: 1, Worker: "w1", Partial: mc},
		{Kind: protocol.KindKeyed, Job: id, Index: maps, Epoch: planEpoch, Attempt: 1, Worker: "w1", Partial: rc},
	} {
		data, err := m.Encode()
		if err != nil {
			return err
		}
		if err := nc.Publish(c.Names().ResultSubject(id), data); err != nil {
			return err
		}
	}
	return nc.Flush()
}

// KeyedChecker judges a keyed wordcount's result on the cluster it was given last: its output
// must equal KeyedReference's (computed once per parameters), and only the outputs and the job's
// metadata may remain in storage.
type KeyedChecker struct {
	mu   sync.Mutex
	c    *cluster.Cluster
	want map[string][]string
}

// Use makes c the cluster whose results Check reads.
func (k *KeyedChecker) Use(c *cluster.Cluster) {
	k.mu.Lock()
	k.c = c
	k.mu.Unlock()
}

// Check returns nil when res (an OutputManifest) is the exact output of the job with params.
func (k *KeyedChecker) Check(params, res json.RawMessage) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.c == nil {
		return fmt.Errorf("no keyed cluster")
	}
	want, ok := k.want[string(params)]
	if !ok {
		var err error
		if want, err = KeyedReference(k.c, params); err != nil {
			return fmt.Errorf("reference output (jobstest.CheckKeyed): %w", err)
		}
		if k.want == nil {
			k.want = map[string][]string{}
		}
		k.want[string(params)] = want
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := KeyedOutput(ctx, k.c, res)
	if err != nil {
		return err
	}
	if err := SameOutput(got, want); err != nil {
		return err
	}
	var m protocol.OutputManifest
	_ = json.Unmarshal(res, &m)
	id, _, _ := strings.Cut(m.Partitions[0].Blob, "/")
	var left []string
	for until := time.Now().Add(15 * time.Second); time.Now().Before(until); time.Sleep(250 * time.Millisecond) {
		if left, err = KeyedLeftovers(ctx, k.c, id, res); err == nil && len(left) == 0 {
			return nil
		}
	}
	return fmt.Errorf("output exact, but left in storage: %s", Clip(strings.Join(left, ", "), 300))
}
