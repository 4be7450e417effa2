package coordinator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// readLegacy reads testdata/legacy-v1.json (see TestCaptureLegacy) and checks that it is what it
// says: checkpoints without a kind, messages of wire version 1, keyed tasks with their magic.
func readLegacy(t *testing.T) *legacyState {
	t.Helper()
	data, err := os.ReadFile("testdata/legacy-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var st legacyState
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{st.Keyed, st.Aggregate} {
		cp := st.Blobs[protocol.CheckpointBlob(id)]
		if !bytes.Contains(cp, []byte(`"version":1,`)) || bytes.Contains(cp, []byte(`"kind"`)) || !bytes.Contains(cp, []byte(`"state":"running"`)) {
			t.Fatalf("checkpoint of %s is not a running one of version 1: %.120s", id, cp)
		}
	}
	keyedTasks := 0
	for _, m := range append(append([]legacyMsg{}, st.Shards...), st.Results...) {
		if len(m.Data) < 3 || m.Data[0] != 'M' || m.Data[2] != 1 {
			t.Fatalf("message on %s is not of wire version 1: %q", m.Subject, m.Data[:min(len(m.Data), 4)])
		}
		if strings.Contains(m.Subject, st.Keyed) && bytes.Contains(m.Data, []byte{0xFF, 'K', protocol.TaskMap}) {
			keyedTasks++
		}
	}
	if keyedTasks == 0 || len(st.Results) == 0 {
		t.Fatalf("no keyed task (%d) or no result (%d) in flight", keyedTasks, len(st.Results))
	}
	return &st
}

// restore puts the previous release's state into the rig's storage and streams, as that release
// left them: blobs with their metadata, shards and results with their message ids.
func (r *rig) restore(st *legacyState) {
	r.t.Helper()
	ctx := context.Background()
	corpus := store.New(r.blob, st.Corpus)
	if err := corpus.Ensure(ctx); err != nil {
		r.t.Fatal(err)
	}
	for name, data := range st.Corpora {
		if _, err := corpus.Put(ctx, name, data, store.Cond{}); err != nil {
			r.t.Fatal(err)
		}
	}
	for name, data := range st.Blobs {
		if _, err := r.st.PutMeta(ctx, name, data, st.Meta[name], store.Cond{}); err != nil {
			r.t.Fatal(err)
		}
	}
	var out []bus.Outgoing
	for _, m := range append(append([]legacyMsg{}, st.Shards...), st.Results...) {
		out = append(out, bus.Outgoing{Subject: m.Subject, MsgID: m.MsgID, Data: m.Data})
	}
	if err := r.b.PublishAll(ctx, out); err != nil {
		r.t.Fatal(err)
	}
}

// A rolling upgrade: a keyed job in its map phase and an aggregate job, half done by the
// previous release (checkpoints without a kind, shards and results of wire version 1 in flight,
// keyed tasks with the magic prefix in messages and stored plan pages), are finished by this
// build exact. Its own checkpoints of them say their kind.
func TestUpgrade_PreviousReleasesHalfDoneJobsFinishExact(t *testing.T) {
	st := readLegacy(t)
	r := newRig(t)
	r.restore(st)
	want := map[string]int64{}
	for _, text := range st.Corpora {
		for _, w := range strings.Fields(string(text)) {
			want[w]++
		}
	}
	spec, err := protocol.ParseSpec(st.Blobs[protocol.SpecBlob(st.Aggregate)])
	if err != nil {
		t.Fatal(err)
	}
	wantAgg := sequential(t, nil, spec.Type, string(spec.Params))

	// No repair and no backups: what the previous release left in flight must be run as it is.
	r.leadWith(2, func(c *Config) { c.RepairInterval, c.NoBackupTasks = time.Hour, true })
	for i := range 2 {
		r.work(worker.Config{ID: fmt.Sprintf("w%d", i), Concurrency: 2, MemoryBudget: 2 << 20, TempDir: t.TempDir()})
	}
	agg := r.wait(st.Aggregate, 90*time.Second)
	if agg.State != jobs.StateSucceeded {
		t.Fatalf("aggregate job %s: %s %s", st.Aggregate, agg.State, agg.Error)
	}
	sameJSON(t, agg.Result, wantAgg)
	keyed := r.wait(st.Keyed, 90*time.Second)
	if keyed.State != jobs.StateSucceeded {
		t.Fatalf("keyed job %s: %s %s", st.Keyed, keyed.State, keyed.Error)
	}
	m, got := r.keyedOutput(st.Keyed)
	sameCounts(t, got, want)
	r.noLeftovers(st.Keyed, m)
	for id, kind := range map[string]protocol.Kind{st.Keyed: protocol.KindKeyed, st.Aggregate: protocol.KindAggregate} {
		data, _, err := r.st.Get(context.Background(), protocol.CheckpointBlob(id))
		if err != nil {
			t.Fatal(err)
		}
		cp, err := protocol.DecodeCheckpoint(data)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Version != protocol.CheckpointVersion || cp.Kind != kind {
			t.Fatalf("final checkpoint of %s: version %d, kind %s; want %d, %s", id, cp.Version, cp.Kind, protocol.CheckpointVersion, kind)
		}
	}
}
