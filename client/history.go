package client

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Attempt is one run of a job's spec: the job, a job it retries, or one of its automatic retries.
type Attempt struct {
	ID         string     `json:"id"`
	State      jobs.State `json:"state"`
	Error      string     `json:"error,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// CheckpointInfo is what the job's checkpoint blob says of itself, read by a HEAD. Each
// checkpoint overwrites the last: Writes counts them, the rest describes the latest.
type CheckpointInfo struct {
	Writes    uint64     `json:"writes"` // the checkpoint's sequence number
	Bytes     int64      `json:"bytes"`
	Epoch     uint64     `json:"epoch"`      // the epoch of the leader that wrote the latest
	PlanEpoch uint64     `json:"plan_epoch"` // the epoch of the leader that planned the job
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// History is a job's attempts, oldest first, and its checkpoint.
type History struct {
	Attempts []Attempt `json:"attempts"`
	// Checkpoint is nil while the job has none (queued) or its checkpoint has no status record.
	Checkpoint *CheckpointInfo `json:"checkpoint,omitempty"`
}

// maxAttempts bounds the attempts History reads each way: retries are at most MaxRetries.
const maxAttempts = protocol.MaxRetries + 2

// History reads the attempts of job id and its checkpoint, metadata only: it never downloads a
// checkpoint or a result. Earlier attempts are found through retry_of, later ones at the ids
// automatic retries take; a retry made by hand of a later attempt is not found.
func (c *Client) History(ctx context.Context, id string) (*History, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	h := &History{Attempts: []Attempt{attemptOf(st)}}
	for prev, n := st.RetryOf, 0; prev != "" && n < maxAttempts; n++ {
		p, err := c.Status(ctx, prev)
		if err != nil {
			h.Attempts = append(h.Attempts, Attempt{ID: prev, State: StateUnreadable, Error: errText(err)})
			break
		}
		h.Attempts = append(h.Attempts, attemptOf(p))
		prev = p.RetryOf
	}
	slices.Reverse(h.Attempts)
	for cur, n := id, 0; n < maxAttempts; n++ {
		next, _ := protocol.RetryJobID(cur)
		s, err := c.Status(ctx, next)
		if errors.Is(err, ErrNoSuchJob) {
			break
		}
		if err != nil {
			h.Attempts = append(h.Attempts, Attempt{ID: next, State: StateUnreadable, Error: errText(err)})
			break
		}
		if s.RetryOf != cur {
			break // a job of that id that is not this one's retry
		}
		h.Attempts = append(h.Attempts, attemptOf(s))
		cur = next
	}
	p, err := c.Store.Props(ctx, protocol.CheckpointBlob(id))
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, err
	default:
		if rec, err := protocol.DecodeStatusRecord(p.Meta); err == nil {
			cp := &CheckpointInfo{Writes: rec.Seq, Bytes: p.Size, Epoch: rec.Epoch, PlanEpoch: rec.PlanEpoch}
			if !rec.UpdatedAt.IsZero() {
				u := rec.UpdatedAt
				cp.UpdatedAt = &u
			}
			h.Checkpoint = cp
		}
	}
	return h, nil
}

func attemptOf(st *Status) Attempt {
	return Attempt{ID: st.ID, State: st.State, Error: protocol.Clip(st.Error, 300), FinishedAt: st.FinishedAt}
}

func errText(err error) string { return protocol.Clip(err.Error(), 300) }
