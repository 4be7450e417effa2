package coordinator

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Keyed jobs (docs/design.md, "Keyed reduce: execution"). A keyed job of S map shards and P
// partitions is planned as S+R ordinary shards of kind keyed (protocol.KeyedTask): S map tasks,
// then R reduce tasks, each of G contiguous partitions (jobs.PartitionsPerReduceTask; R =
// ⌈P/G⌉). Its runner (keyedRun) holds task metadata only: the committed map blob and
// run offsets of each shard, the committed output blob of each partition. The first result of a task is its
// commit, recorded with the done-bitmap in the fenced checkpoint, exactly like a merge. The
// dispatcher stops at S (the gate) until a stored checkpoint commits every map task and the map
// manifest (built from it) is stored; then it dispatches the reduce tasks. The result is the
// protocol.OutputManifest. The leader never reads a key.

// keyedRun runs a keyed job: it records which attempt of each task is committed.
type keyedRun struct {
	kj            jobs.KeyedJob // the job's code; nil in a job resumed from its checkpoint
	log           *slog.Logger
	id, container string
	S, P          int
	G             int // partitions a reduce task (the last may have fewer)
	// out is the outputs' stored format and text columns ("": JSON lines, as earlier releases).
	out                string
	keyText, valueText bool
	maps               []*protocol.MapCommit
	outs               []*protocol.OutputPartition
	nMaps, nOuts       int
	// manifest: the map manifest is being written or stored (set by the loop; the loop opens
	// the job's gate once the writer says it is stored).
	manifest bool
	// checks numbers the map-run checks (manifest writes) and the output checks, so the loop
	// takes only the latest one's news; checking, verifying: one is under way.
	checks, outChecks   int
	checking, verifying bool
	// opened: the gate has opened in this term (reduce commits are taken from then on, even
	// while lost map tasks run again). verified: every committed output was found whole.
	opened, verified bool
	// redo are the reduce tasks that reported a lost input, dispatched again when the gate
	// opens next. reported is the last lost blob reported since a check found a loss, and
	// idle how many checks in a row found nothing a report said was lost.
	redo     map[int]bool
	reported string
	idle     int
}

var _ runner = (*keyedRun)(nil)

// keyedMaxIdleChecks: reduce tasks that report an input lost which the leader finds whole this
// many times in a row fail the job (the two disagree; running it again cannot help).
const keyedMaxIdleChecks = 3

// keyedState is keyedRun's checkpointed form (Checkpoint.Aggregate).
type keyedState struct {
	Keyed int                         `json:"keyed"` // 1
	S     int                         `json:"s"`
	P     int                         `json:"p"`
	G     int                         `json:"g,omitempty"`   // partitions a reduce task; 0: 1 (earlier releases)
	Out   string                      `json:"out,omitempty"` // the outputs' format; "": JSON lines (earlier releases)
	KT    bool                        `json:"kt,omitempty"`  // TSV: the key column is text
	VT    bool                        `json:"vt,omitempty"`  // TSV: the value column is text
	Maps  []*protocol.MapCommit       `json:"maps"`
	Outs  []*protocol.OutputPartition `json:"outs"`
}

func newKeyedRun(id, container string, s, p int) *keyedRun {
	return &keyedRun{id: id, container: container, S: s, P: p, G: 1, maps: make([]*protocol.MapCommit, s), outs: make([]*protocol.OutputPartition, p)}
}

// restore sets the run's state from its checkpointed form.
func (a *keyedRun) restore(data []byte) error {
	var st keyedState
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("%w: keyed state: %v", jobs.ErrBadCheckpoint, err)
	}
	if st.Keyed != 1 || st.S < 0 || st.P < 1 || len(st.Maps) != st.S || len(st.Outs) != st.P || st.G < 0 || st.G > st.P {
		return fmt.Errorf("%w: keyed state: %d maps of %d, %d outputs of %d, %d partitions a reduce task", jobs.ErrBadCheckpoint, len(st.Maps), st.S, len(st.Outs), st.P, st.G)
	}
	if st.Out != "" && !slices.Contains(jobs.OutputFormats(), st.Out) {
		return fmt.Errorf("%w: keyed state: output format %q", jobs.ErrBadCheckpoint, st.Out)
	}
	a.S, a.P, a.G, a.maps, a.outs, a.nMaps, a.nOuts = st.S, st.P, max(st.G, 1), st.Maps, st.Outs, 0, 0
	a.out, a.keyText, a.valueText = st.Out, st.KT, st.VT
	for _, m := range a.maps {
		if m != nil {
			a.nMaps++
		}
	}
	for _, o := range a.outs {
		if o != nil {
			a.nOuts++
		}
	}
	return nil
}

// result is the OutputManifest of the committed outputs.
func (a *keyedRun) result(*job) (json.RawMessage, error) {
	if a.nOuts != a.P {
		return nil, fmt.Errorf("keyed job %s: %d of %d partitions committed", a.id, a.nOuts, a.P)
	}
	m := protocol.OutputManifest{Kind: protocol.OutputKind, Format: cmp.Or(a.out, jobs.OutputJSONL), Container: a.container,
		Partitions: make([]protocol.OutputPartition, a.P)}
	if strings.HasPrefix(m.Format, jobs.OutputTSV) {
		m.KeyText, m.ValueText = a.keyText, a.valueText
	}
	for p, o := range a.outs {
		m.Partitions[p] = *o
		m.Records += o.Records
		m.Bytes += o.Bytes
	}
	return json.Marshal(m)
}

// commit records the result of task r.Index (not yet done) as its committed attempt. An error
// means the result is not a genuine commit of this task: nothing changes.
func (a *keyedRun) commit(r *protocol.ResultMsg, partial []byte) error {
	if r.Index < a.S {
		c, err := protocol.DecodeMapCommit(a.id, r.Index, a.P, partial)
		if err != nil {
			return err
		}
		a.maps[r.Index] = c
		a.nMaps++
		return nil
	}
	first, n := a.partitionsOf(r.Index)
	if n < 1 {
		return fmt.Errorf("a result of task %d: the job has %d tasks", r.Index, a.tasks())
	}
	if a.nMaps != a.S && !a.opened {
		return fmt.Errorf("a result of reduce task %d before the map phase ended", r.Index-a.S)
	}
	cs, err := protocol.DecodeReduceCommits(a.id, first, n, partial)
	if err != nil {
		return err
	}
	for i, c := range cs {
		// A partition of the group still committed (a task run again for another partition's
		// lost output) keeps its commit: this attempt's blob is left to the clean-up.
		if a.outs[first+i] == nil {
			a.outs[first+i] = c
			a.nOuts++
		}
	}
	return nil
}

// tasks is the job's task count: S map tasks, then ⌈P/G⌉ reduce tasks.
func (a *keyedRun) tasks() int { return a.S + (a.P+a.G-1)/a.G }

// partitionsOf returns the partitions reduce task index reduces: count from first (count 0: no
// such reduce task).
func (a *keyedRun) partitionsOf(index int) (first, count int) {
	if index < a.S || index >= a.tasks() {
		return 0, 0
	}
	first = (index - a.S) * a.G
	return first, min(a.G, a.P-first)
}

// taskOf is the index of the reduce task of partition p.
func (a *keyedRun) taskOf(p int) int { return a.S + p/a.G }

// phase is what status shows: the phase and its progress.
func (a *keyedRun) phase() (string, int, int) {
	if a.nMaps < a.S {
		return protocol.PhaseMap, a.nMaps, a.S
	}
	return protocol.PhaseReduce, a.nOuts, a.P
}

// state is the run's checkpointed form, and its phase.
func (a *keyedRun) state(_ *job, final bool) (runState, error) {
	st := runState{maps: a.nMaps}
	st.phase, st.phaseDone, st.phaseTotal = a.phase()
	if final {
		st.encode = func() ([]byte, error) { return nil, nil }
		return st, nil
	}
	g := a.G
	if g == 1 {
		g = 0 // as earlier releases wrote it
	}
	data, err := json.Marshal(keyedState{Keyed: 1, S: a.S, P: a.P, G: g, Out: a.out, KT: a.keyText, VT: a.valueText, Maps: a.maps, Outs: a.outs})
	if err != nil {
		return st, fmt.Errorf("encode keyed state: %w", err)
	}
	st.encode = func() ([]byte, error) { return data, nil }
	return st, nil
}

// due: every map task is committed in memory and the manifest is not written yet; the next
// checkpoint is due at once (the manifest follows it).
func (a *keyedRun) due() bool { return a.nMaps == a.S && !a.manifest }

// reduceGroup is how many partitions a reduce task of a job of mapTasks map tasks and parts
// partitions reduces, on a cluster of slots slots for its type (0: unknown):
// jobs.PartitionsPerReduceTask's, or more when the slots are fewer than its reduce tasks. The
// reduce phase of R equal tasks on S slots takes ⌈R/S⌉ task times; grouping ⌈P/S⌉ partitions a
// task keeps it within one wave of tasks of that size, so it does not take longer, and each
// task fewer costs a read of every map run (a request the store spends 2–3 ms of CPU on) and
// the task's own requests. Tasks are fixed at planning: a cluster that grows later keeps the
// job's groups.
func reduceGroup(mapTasks, parts, slots int) int {
	g := jobs.PartitionsPerReduceTask(mapTasks, parts)
	if slots > 0 {
		g = max(g, (parts+slots-1)/slots)
	}
	return g
}

// outputOf is the stored format of a keyed job's outputs and its text columns, given the
// spec's choice and the columns the job's code says are text: the choice, else TSV when the
// keys are text, else JSON lines ("", as earlier releases).
func outputOf(format string, keyText, valueText bool) (string, bool, bool) {
	if format == "" && keyText {
		format = jobs.OutputTSV
	}
	if format == jobs.OutputJSONL {
		format = ""
	}
	if !strings.HasPrefix(format, jobs.OutputTSV) {
		keyText, valueText = false, false
	}
	return format, keyText, valueText
}

// runsKeyed asks the job's code (isolated) whether this job runs keyed.
func runsKeyed(spec *protocol.Spec, impl jobs.Job) (kj jobs.KeyedJob, err error) {
	err = core.Isolate(spec.Type, "runs keyed", func() error {
		kj = jobs.KeyedOf(impl, spec.Params)
		return nil
	})
	return kj, err
}

// plan plans a keyed job: its partitions, its split, and the plan of S map and P reduce tasks,
// stored in pages like any split job's.
func (a *keyedRun) plan(ctx context.Context, pl planHost, j *job) error {
	spec, kj, env := j.spec, a.kj, pl.planEnv(j.spec.Type)
	var parts int
	if err := j.call("partitions", func() (err error) { parts, err = kj.Partitions(spec.Params); return err }); err != nil {
		return err
	}
	var shards [][]byte
	if err := j.call("split", func() (err error) { shards, err = kj.Split(ctx, env.env, spec.Params); return err }); err != nil {
		return core.WrapOp("split", err)
	}
	if parts == 0 {
		parts = jobs.PartitionsFor(len(shards), env.partitions) // follows the input, the cluster's default at least
	}
	if len(shards)+parts > jobs.MaxShards {
		return fmt.Errorf("split made %d shards; with %d partitions the limit is %d", len(shards), parts, jobs.MaxShards-parts)
	}
	slots := 0
	if se, ok := env.env.(jobs.SlotsEnv); ok {
		slots = se.Slots()
	}
	group := reduceGroup(len(shards), parts, slots)
	var keyText, valueText bool
	if err := j.call("output text", func() error { keyText, valueText = jobs.OutputTextOf(kj); return nil }); err != nil {
		return err
	}
	out, keyText, valueText := outputOf(spec.OutputFormat, keyText, valueText)
	tasks := make([][]byte, 0, len(shards)+(parts+group-1)/group)
	for i, s := range shards {
		if len(s) > protocol.MaxKeyedShardBytes {
			return fmt.Errorf("shard %d is %d bytes; a keyed job's limit is %d", i, len(s), protocol.MaxKeyedShardBytes)
		}
		tasks = append(tasks, protocol.EncodeKeyedTask(protocol.KeyedTask{Task: protocol.TaskMap, Partitions: parts, Shard: s}))
	}
	for p := 0; p < parts; p += group {
		tasks = append(tasks, protocol.EncodeKeyedTask(protocol.KeyedTask{Task: protocol.TaskReduce, Partitions: parts,
			Partition: p, Count: min(group, parts-p), MapShards: len(shards), Output: out, KeyText: keyText, ValueText: valueText}))
	}
	if err := pl.planShards(ctx, j.id, tasks); err != nil {
		return fmt.Errorf("%w: %v", errPlanStorage, err)
	}
	planned := newKeyedRun(j.id, env.container, len(shards), parts)
	planned.G, planned.out, planned.keyText, planned.valueText = group, out, keyText, valueText
	planned.kj, planned.log = a.kj, env.log
	*a = *planned
	j.cp.Total, j.cp.Plan = len(tasks), protocol.PlanPages
	j.cp.Phase, j.cp.PhaseDone, j.cp.PhaseTotal = a.phase() // the first status record's
	j.gate.Store(int64(len(shards)) + 1)
	return nil
}

// adopted closes a resumed keyed job's gate until its map manifest is stored, and writes the
// manifest when every map task is committed already. Map tasks taken back after the gate had
// opened (their runs lost) are dispatched again; a job with every task done checks its outputs
// before it finalizes.
func (a *keyedRun) adopted(ctx context.Context, h runHost, j *job) {
	if a.nMaps < a.S {
		j.gate.Store(int64(a.S) + 1)
		if j.cp.Dispatched > a.S && j.cp.State == jobs.StateRunning {
			h.dispatchAgain(ctx, j, missingIn(j.done, 0, uint64(a.S)).ToArray())
		}
		return
	}
	// The checkpoint just claimed commits every map task (a job with every task done needs no
	// manifest: it finalizes).
	if !a.manifest && !j.complete {
		h.writeManifest(ctx, j, a)
	}
	if j.complete && j.cp.State == jobs.StateRunning {
		j.complete = false
		h.checkOutputs(ctx, j, a)
	}
}

// stored runs after a checkpoint of j is stored: once one commits every map task, the map
// manifest is written from it. Every task must still be committed now: a check that found runs
// lost between the checkpoint and its store took them back (they run again, and a later
// checkpoint that commits them writes the manifest).
func (a *keyedRun) stored(ctx context.Context, h runHost, j *job, s runState) {
	if !a.manifest && s.maps == a.S && a.nMaps == a.S && !j.cp.State.Terminal() {
		h.writeManifest(ctx, j, a)
	}
}

// accept commits r, a result of the job's task (its partial is the commit). A reduce task's
// report of a lost input, or a result that is not a genuine commit, leaves the task missing.
func (a *keyedRun) accept(ctx context.Context, h runHost, j *job, r *protocol.ResultMsg, partial []byte) mergeOutcome {
	if r.Index >= a.S {
		first, _ := a.partitionsOf(r.Index)
		l, isLoss, err := protocol.DecodeRunLost(j.id, first, partial)
		if err != nil {
			return h.refuseResult(ctx, j, r, fmt.Sprintf("result for task %d of job %s: %v", r.Index, r.Job, err))
		}
		if isLoss {
			a.onRunLost(ctx, h, j, l)
			return mergeDropped
		}
	}
	if err := a.commit(r, partial); err != nil {
		return h.refuseResult(ctx, j, r, fmt.Sprintf("result for task %d of job %s cannot be committed: %v", r.Index, r.Job, err))
	}
	return mergeDone
}

// onRunLost takes a reduce task's report that an input is gone (a storage rollback after the
// manifest). The task runs again once the gate reopens. That is after the leader has checked every
// committed run (running lost map tasks again) and rewritten the manifest.
func (ka *keyedRun) onRunLost(ctx context.Context, h runHost, j *job, l *protocol.RunLost) {
	ka.log.Warn("a reduce task reports an input gone from storage (a rollback?); checking the map runs", "job", j.id, "partition", l.Partition, "blob", l.Lost)
	if ka.redo == nil {
		ka.redo = map[int]bool{}
	}
	ka.redo[l.Partition] = true
	ka.reported = l.Lost
	if ka.checking || ka.nMaps < ka.S {
		return // a check, or the map tasks it found lost, are under way: the gate opens after
	}
	h.writeManifest(ctx, j, ka)
}

// ready reports whether every committed output was found whole. Otherwise it starts that check
// (the loop completes j when it is done).
func (a *keyedRun) ready(ctx context.Context, h runHost, j *job) bool {
	if a.verified {
		return true
	}
	if !a.verifying {
		h.checkOutputs(ctx, j, a)
	}
	return false
}
