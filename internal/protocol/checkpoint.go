package protocol

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// ErrBadCheckpoint is matched by every error DecodeCheckpoint and DecodePlanPage return.
var ErrBadCheckpoint = jobs.ErrBadCheckpoint

// CheckpointVersion is the format written by this build. Version 2 added Kind; version 1 is
// still read (its kind is the job code's, see Kind).
const CheckpointVersion = 2

// checkpointLegacyVersion is the format before Kind.
const checkpointLegacyVersion = 1

// Checkpoint is a job's durable state: <job-id>/checkpoint, written by the leader in one
// conditional blob write. Done and Aggregate change together, which is what makes aggregation
// exactly-once: a shard is in Done if and only if its partial is in Aggregate.
type Checkpoint struct {
	Version int    `json:"version"`
	Job     string `json:"job"`
	Type    string `json:"type"`
	// Kind is how the job runs, decided when it was planned. Zero in a checkpoint of version 1
	// (the coordinator then asks the job's code, as that release did) and of a job refused
	// before it was planned.
	Kind  Kind       `json:"kind,omitempty"`
	State jobs.State `json:"state"`
	// PlanEpoch is the epoch of the leader that planned the job; shards carry it.
	PlanEpoch uint64 `json:"plan_epoch"`
	// WriterEpoch is the epoch of the leader that wrote this checkpoint. A leader never overwrites
	// a checkpoint written by a higher epoch: it has been deposed.
	WriterEpoch uint64 `json:"writer_epoch"`
	// WriterTerm identifies the term (one leadership of one process: a random id) that wrote
	// this checkpoint. Epochs come from the lease blob's metadata, which a storage rollback can
	// take back in time, so two terms may hold the same epoch. A leader therefore also steps down
	// when it finds a checkpoint of its own epoch written by another term. Empty in checkpoints of
	// earlier builds (treated as another term's).
	WriterTerm string `json:"writer_term,omitempty"`
	Total      int    `json:"total"`
	DoneCount  int    `json:"done_count"`
	// Dispatched is how many shards, from index 0, were published and acknowledged by JetStream.
	Dispatched int `json:"dispatched"`
	// ShardsPerMsg is how many consecutive shards travel in one message (0 or 1: one each),
	// decided when the job is planned: message k carries shards [k·n, (k+1)·n), with
	// Nats-Msg-Id ShardMsgID(job, k·n), so a new leader re-dispatching sends the same messages.
	ShardsPerMsg int `json:"shards_per_msg,omitempty"`
	// Plan says where the shards come from: PlanIndexed (made from the parameters on demand,
	// nothing stored) or PlanPages (stored in pages of PlanPageShards, PlanPageBlob). "" only in
	// a checkpoint of a job refused before it was planned.
	Plan string `json:"plan,omitempty"`
	// Done is the set of merged shards, as a serialized roaring bitmap.
	Done []byte `json:"done"`
	// Aggregate is the job's Aggregate.MarshalBinary; empty once the job has ended (its Result
	// is what a terminal checkpoint keeps: an ended job is never resumed).
	Aggregate []byte `json:"aggregate"`
	// Duplicates counts results dropped because their shard was already merged.
	Duplicates int64           `json:"duplicates"`
	Error      string          `json:"error,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	// ResultStored: the result is in <job>/result.json only (dropped from the checkpoint once
	// the copy was stored, so it is stored once).
	ResultStored bool   `json:"result_stored,omitempty"`
	Seq          uint64 `json:"seq"`
	// Phase is a keyed job's stage ("map", "reduce"), with its progress; empty for other jobs.
	Phase      string     `json:"phase,omitempty"`
	PhaseDone  int        `json:"phase_done,omitempty"`
	PhaseTotal int        `json:"phase_total,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Encode returns the checkpoint's stored form.
func (c *Checkpoint) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCheckpoint parses a stored checkpoint and checks that it is self-consistent.
func DecodeCheckpoint(data []byte) (*Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadCheckpoint, err)
	}
	switch {
	case c.Version != CheckpointVersion && c.Version != checkpointLegacyVersion:
		return nil, fmt.Errorf("%w: version %d, this build reads %d and %d", ErrBadCheckpoint, c.Version, checkpointLegacyVersion, CheckpointVersion)
	case c.Version == checkpointLegacyVersion && c.Kind != 0:
		return nil, fmt.Errorf("%w: version %d has no job kind", ErrBadCheckpoint, c.Version)
	case c.Version == CheckpointVersion && c.Kind == 0 && c.Plan != "":
		return nil, fmt.Errorf("%w: a planned job without a kind", ErrBadCheckpoint)
	case CheckID(c.Job) != nil:
		return nil, fmt.Errorf("%w: job id %q", ErrBadCheckpoint, c.Job)
	case c.Total < 0 || c.Total > jobs.MaxShards || c.DoneCount < 0 || c.DoneCount > c.Total ||
		c.Dispatched < 0 || c.Dispatched > c.Total:
		return nil, fmt.Errorf("%w: counts out of range (total %d, done %d, dispatched %d)", ErrBadCheckpoint, c.Total, c.DoneCount, c.Dispatched)
	case c.ShardsPerMsg < 0 || c.ShardsPerMsg > MaxShardBatch:
		return nil, fmt.Errorf("%w: %d shards per message, at most %d", ErrBadCheckpoint, c.ShardsPerMsg, MaxShardBatch)
	case c.PlanEpoch == 0 || c.WriterEpoch < c.PlanEpoch:
		return nil, fmt.Errorf("%w: epochs out of order (plan %d, writer %d)", ErrBadCheckpoint, c.PlanEpoch, c.WriterEpoch)
	}
	switch c.Plan {
	case "", PlanIndexed, PlanPages:
	default:
		return nil, fmt.Errorf("%w: plan form %q (this build knows %q and %q)", ErrBadCheckpoint, c.Plan, PlanIndexed, PlanPages)
	}
	switch c.State {
	case jobs.StateRunning, jobs.StateWaiting, jobs.StateSucceeded, jobs.StateFailed, jobs.StateCancelled:
	default:
		return nil, fmt.Errorf("%w: state %q", ErrBadCheckpoint, c.State)
	}
	return &c, nil
}
