package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// ErrBadCheckpoint is matched by every error DecodeCheckpoint and DecodePlan return.
var ErrBadCheckpoint = jobs.ErrBadCheckpoint

// CheckpointVersion is the format written by this build.
const CheckpointVersion = 1

// Checkpoint is a job's durable state: <job-id>/checkpoint, written by the leader in one
// conditional blob write. Done and Aggregate change together, which is what makes aggregation
// exactly-once: a shard is in Done if and only if its partial is in Aggregate.
type Checkpoint struct {
	Version int        `json:"version"`
	Job     string     `json:"job"`
	Type    string     `json:"type"`
	State   jobs.State `json:"state"`
	// PlanEpoch is the epoch of the leader that planned the job; shards carry it.
	PlanEpoch uint64 `json:"plan_epoch"`
	// WriterEpoch is the epoch of the leader that wrote this checkpoint. A leader never overwrites
	// a checkpoint written by a higher epoch: it has been deposed.
	WriterEpoch uint64 `json:"writer_epoch"`
	// WriterTerm identifies the term (one leadership of one process: a random id) that wrote
	// this checkpoint. Epochs come from the lease blob's metadata, which a storage rollback can
	// take back in time, so two terms may hold the same epoch: a leader also steps down when it
	// finds a checkpoint of its own epoch written by another term. Empty in checkpoints of
	// earlier builds (treated as another term's).
	WriterTerm string `json:"writer_term,omitempty"`
	Total       int    `json:"total"`
	DoneCount   int    `json:"done_count"`
	// Dispatched is how many shards, from index 0, were published and acknowledged by JetStream.
	Dispatched int `json:"dispatched"`
	// ShardsPerMsg is how many consecutive shards travel in one message (0 or 1: one each),
	// decided when the job is planned: message k carries shards [k·n, (k+1)·n), with
	// Nats-Msg-Id ShardMsgID(job, k·n), so a new leader re-dispatching sends the same messages.
	ShardsPerMsg int `json:"shards_per_msg,omitempty"`
	// Done is the set of merged shards, as a serialized roaring bitmap.
	Done []byte `json:"done"`
	// Aggregate is the job's Aggregate.MarshalBinary.
	Aggregate []byte `json:"aggregate"`
	// Duplicates counts results dropped because their shard was already merged.
	Duplicates int64           `json:"duplicates"`
	Error      string          `json:"error,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	Seq        uint64          `json:"seq"`
	StartedAt  time.Time       `json:"started_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
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
	case c.Version != CheckpointVersion:
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrBadCheckpoint, c.Version, CheckpointVersion)
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
	switch c.State {
	case jobs.StateRunning, jobs.StateSucceeded, jobs.StateFailed, jobs.StateCancelled:
	default:
		return nil, fmt.Errorf("%w: state %q", ErrBadCheckpoint, c.State)
	}
	return &c, nil
}

var planMagic = []byte("MAPAGG-PLAN\x01")

// EncodePlan serializes a job's shards (the output of Split) for <job-id>/plan.
func EncodePlan(shards [][]byte) []byte {
	n := len(planMagic) + binary.MaxVarintLen64
	for _, s := range shards {
		n += binary.MaxVarintLen64 + len(s)
	}
	b := make([]byte, 0, n+4)
	b = append(b, planMagic...)
	b = binary.AppendUvarint(b, uint64(len(shards)))
	for _, s := range shards {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
}

// DecodePlan parses EncodePlan's output, verifying its checksum and bounds.
func DecodePlan(data []byte) ([][]byte, error) {
	if len(data) < len(planMagic)+5 || !bytes.HasPrefix(data, planMagic) {
		return nil, fmt.Errorf("%w: plan: not a plan", ErrBadCheckpoint)
	}
	body, sum := data[:len(data)-4], binary.BigEndian.Uint32(data[len(data)-4:])
	if crc32.ChecksumIEEE(body) != sum {
		return nil, fmt.Errorf("%w: plan: checksum mismatch", ErrBadCheckpoint)
	}
	r := body[len(planMagic):]
	count, k := binary.Uvarint(r)
	if k <= 0 || count > jobs.MaxShards {
		return nil, fmt.Errorf("%w: plan: shard count", ErrBadCheckpoint)
	}
	r = r[k:]
	shards := make([][]byte, 0, count)
	for i := uint64(0); i < count; i++ {
		l, k := binary.Uvarint(r)
		if k <= 0 || l > jobs.MaxShardBytes || l > uint64(len(r)-k) {
			return nil, fmt.Errorf("%w: plan: shard %d length", ErrBadCheckpoint, i)
		}
		r = r[k:]
		shards = append(shards, r[:l:l])
		r = r[l:]
	}
	if len(r) != 0 {
		return nil, fmt.Errorf("%w: plan: %d trailing bytes", ErrBadCheckpoint, len(r))
	}
	return shards, nil
}
