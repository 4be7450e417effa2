package coordinator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// The term's side of a keyed job (keyed.go): what a keyedRun asks of its host (dispatching
// tasks again, writing the map manifest, checking outputs), and the loop's handling of
// committed map runs found lost.

// dispatchAgain dispatches tasks idx of j once more (self-repair's message ids).
func (t *term) dispatchAgain(ctx context.Context, j *job, idx []uint32) {
	if len(idx) == 0 {
		return
	}
	src, err := t.plans.source(j)
	if err != nil {
		t.fail(j, core.WrapOp("dispatch", err))
		return
	}
	ints := make([]int, len(idx))
	for i, x := range idx {
		ints[i] = int(x)
	}
	sort.Ints(ints)
	t.rep.emit(Event{Kind: EventRepaired, Epoch: t.fence.Epoch, Job: j.id, Shard: ints[0], Count: len(ints)})
	t.dispatchers.Add(1)
	go func(id, typ string, epoch uint64, round, per int) {
		defer t.dispatchers.Done()
		t.send.dispatchRepair(ctx, id, typ, epoch, round, per, src, ints)
	}(j.id, j.spec.Type, j.cp.PlanEpoch, int(time.Now().UnixMilli()), max(j.cp.ShardsPerMsg, 1))
}

// writeManifest closes j's gate, checks every committed map run and stores the map manifest in
// the background, retrying until the term ends; then the loop opens the gate (onKeyedLoss): the
// reduce tasks are dispatched. Every committed attempt is stored, so any leader writes the same
// manifest.
func (t *term) writeManifest(ctx context.Context, j *job, ka *keyedRun) {
	ka.manifest, ka.checking = true, true
	ka.checks++
	check := ka.checks
	j.gate.Store(int64(ka.S) + 1)
	m := protocol.MapManifest{Job: j.id, Partitions: ka.P, Maps: make([]protocol.MapCommit, ka.S)}
	for i, c := range ka.maps {
		m.Maps[i] = *c
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.fail(j, fmt.Errorf("encode the map manifest: %w", err))
		return
	}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		for {
			lost, err := t.lostRuns(ctx, j.id, m.Maps)
			if err == nil && len(lost) > 0 {
				t.keyedNews(ctx, keyedLoss{job: j.id, run: ka, check: check, blobs: lost})
				return
			}
			if err == nil {
				_, err = t.store.Put(ctx, protocol.MapManifestBlob(j.id), data, store.Cond{})
			}
			if err == nil {
				break
			}
			t.log.Warn("write the map manifest; retrying", "job", j.id, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		t.keyedNews(ctx, keyedLoss{job: j.id, run: ka, check: check})
		// A cancel while the manifest was written: checked after the news (which the loop ignores
		// for an ended job), so that the reduce tasks do not wait on one more request.
		t.endedMeanwhile(ctx, j.id, protocol.MapManifestBlob(j.id))
	}()
}

// endedMeanwhile deletes blob, just stored for job id by a background writer, if the job's
// status record says it ended: its clean-up may have run before the write (a cancel while the
// manifest was being written). Clean-up deletes after the terminal checkpoint is stored, so one of
// the two deletes comes after the write.
func (t *term) endedMeanwhile(ctx context.Context, id, blob string) bool {
	p, err := t.store.Props(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return false
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	if err != nil || !rec.State.Terminal() {
		return false
	}
	if err := t.store.Delete(ctx, blob); err != nil && !errors.Is(err, store.ErrNotFound) {
		t.log.Warn("delete a blob written after its job ended", "job", id, "blob", blob, "err", err)
	}
	return true
}

func (t *term) keyedNews(ctx context.Context, l keyedLoss) {
	select {
	case t.keyedLost <- l:
	case <-ctx.Done():
	}
}

// lostRuns checks that every committed map run is stored whole: a storage rollback (Azurite's
// kill -9 loses its last seconds of writes) can lose a run whose commit survived in a later
// checkpoint. One listing of the job's runs answers for all of them (storedSizes).
func (t *term) lostRuns(ctx context.Context, id string, maps []protocol.MapCommit) (map[int]string, error) {
	sizes, err := t.storedSizes(ctx, protocol.MapPrefix(id))
	if err != nil {
		return nil, err
	}
	lost := map[int]string{}
	for i, c := range maps {
		if size, ok := sizes[c.Blob]; !ok || size != c.Offsets[len(c.Offsets)-1] {
			lost[i] = c.Blob
		}
	}
	return lost, nil
}

// storedSizes lists the blobs under prefix: each one's size by name. A listing is one request
// a page of 5,000 blobs where a HEAD a blob was one request each, in turn, on the path between
// a job's phases (a 24-map job's check took 24 requests before its reduce tasks could start).
// A listing sees what a HEAD sees: Azure's is strongly consistent, and Azurite answers both
// from the same metadata.
func (t *term) storedSizes(ctx context.Context, prefix string) (map[string]int64, error) {
	blobs, err := t.store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	sizes := make(map[string]int64, len(blobs))
	for _, b := range blobs {
		sizes[b.Name] = b.Size
	}
	return sizes, nil
}

// onKeyedLoss takes a storage check's news. It opens the gate (every run found), or takes back the
// commits of lost map runs and dispatches their tasks again. The manifest is written once they are
// committed again. Lost outputs get the same (outputsChecked).
func (t *term) onKeyedLoss(ctx context.Context, l keyedLoss) {
	j := t.tab.get(l.job)
	if j == nil || j.cp.State.Terminal() || j.run != runner(l.run) {
		return
	}
	ka := l.run
	if l.outputs {
		if l.check == ka.outChecks {
			t.outputsChecked(ctx, j, ka, l.blobs)
		}
		return
	}
	if l.check != ka.checks {
		return
	}
	ka.checking = false
	if len(l.blobs) == 0 {
		t.openGate(ctx, j, ka)
		return
	}
	ka.reported, ka.idle = "", 0
	var idx []int
	for s, blob := range l.blobs {
		if c := ka.maps[s]; c != nil && c.Blob == blob {
			ka.maps[s] = nil
			ka.nMaps--
			j.done.Remove(uint32(s))
			j.merged.Add(-1)
			idx = append(idx, s)
		}
	}
	ka.manifest = false
	j.dirty, j.complete = true, false
	sort.Ints(idx)
	t.log.Warn("committed map runs are gone from storage (a rollback?); running their tasks again", "job", j.id, "shards", idx)
	t.dispatchAgain(ctx, j, u32s(idx))
}

// openGate opens j's gate once its map manifest is stored: the dispatcher goes on with the
// reduce tasks, and those that reported a lost input run again.
func (t *term) openGate(ctx context.Context, j *job, ka *keyedRun) {
	if ka.reported != "" && ka.reported != protocol.MapManifestBlob(j.id) {
		// A reduce task said a run was gone, and the check found every run whole.
		if ka.idle++; ka.idle >= keyedMaxIdleChecks {
			t.fail(j, fmt.Errorf("reduce tasks report %s lost, but the leader finds it whole (%d checks)", ka.reported, ka.idle))
			return
		}
	}
	ka.reported = ""
	t.log.Info("map phase committed; reduce tasks dispatched", "job", j.id, "maps", ka.S, "partitions", ka.P, "reduce_tasks", ka.tasks()-ka.S, "again", len(ka.redo))
	ka.opened = true
	// Reduce tasks are not map tasks: their backups wait on their own run times (each task is
	// still backed up at most once a term).
	j.bk = backupState{backed: j.bk.backed}
	j.gate.Store(0)
	j.wake()
	var idx []int
	for p := range ka.redo {
		if task := ka.taskOf(p); !j.done.Contains(uint32(task)) {
			idx = append(idx, task)
		}
	}
	ka.redo = nil
	t.dispatchAgain(ctx, j, u32s(idx))
}

// checkOutputs checks in the background that every committed output blob is stored whole (one
// listing), before the output manifest names it: a storage rollback can lose an output whose
// commit survived.
func (t *term) checkOutputs(ctx context.Context, j *job, ka *keyedRun) {
	ka.verifying = true
	ka.outChecks++
	check := ka.outChecks
	outs := make([]protocol.OutputPartition, len(ka.outs))
	for p, o := range ka.outs {
		outs[p] = *o
	}
	t.cleanups.Add(1)
	go func() {
		defer t.cleanups.Done()
		for {
			lost, err := t.lostOutputs(ctx, j.id, outs)
			if err == nil {
				t.keyedNews(ctx, keyedLoss{job: j.id, run: ka, check: check, outputs: true, blobs: lost})
				return
			}
			t.log.Warn("check the outputs; retrying", "job", j.id, "err", err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
}

// lostOutputs returns the outputs that storage does not have with their committed size (one
// listing of the job's outputs).
func (t *term) lostOutputs(ctx context.Context, id string, outs []protocol.OutputPartition) (map[int]string, error) {
	sizes, err := t.storedSizes(ctx, protocol.OutputPrefix(id))
	if err != nil {
		return nil, err
	}
	lost := map[int]string{}
	for _, o := range outs {
		if size, ok := sizes[o.Blob]; !ok || size != o.Bytes {
			lost[o.Partition] = o.Blob
		}
	}
	return lost, nil
}

// outputsChecked completes j when every output was found whole; otherwise it takes back the
// commits of the lost ones and runs their reduce tasks again.
func (t *term) outputsChecked(ctx context.Context, j *job, ka *keyedRun, lost map[int]string) {
	ka.verifying = false
	if len(lost) == 0 {
		ka.verified = true
		if int(j.done.GetCardinality()) == j.cp.Total {
			j.complete, j.dirty = true, true
			if !j.w.writing {
				t.ck.start(ctx, j)
			}
		}
		return
	}
	var idx []int
	for p, blob := range lost {
		if o := ka.outs[p]; o != nil && o.Blob == blob {
			ka.outs[p] = nil
			ka.nOuts--
			// The task runs again; its result commits only the partitions taken back.
			if task := ka.taskOf(p); j.done.Contains(uint32(task)) {
				j.done.Remove(uint32(task))
				j.merged.Add(-1)
				idx = append(idx, task)
			}
		}
	}
	j.dirty = true
	sort.Ints(idx)
	t.log.Warn("committed outputs are gone from storage (a rollback?); running their reduce tasks again", "job", j.id, "tasks", idx)
	t.dispatchAgain(ctx, j, u32s(idx))
}
