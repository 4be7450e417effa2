package client

import (
	"context"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Mark is one moment of a job's life on its timeline.
type Mark struct {
	// What happened: "submitted", "started", "map done", "reduce done" or "finished".
	What string    `json:"what"`
	At   time.Time `json:"at"`
}

// Timeline returns the moments of st's job that storage holds, in order: submitted and started
// (its status record); for a keyed job, the end of its map phase (when the map manifest was
// written, kept while the job runs) and of its reduce phase (when the output manifest was
// written); and its end. A moment storage no longer holds is left out; reads are metadata
// only (HEADs), two at most.
func (c *Client) Timeline(ctx context.Context, st *Status) []Mark {
	var out []Mark
	add := func(what string, at time.Time) {
		if !at.IsZero() {
			out = append(out, Mark{What: what, At: at.UTC()})
		}
	}
	add("submitted", st.SubmittedAt)
	if st.StartedAt != nil {
		add("started", *st.StartedAt)
	}
	if st.Phase != "" {
		if st.Phase == protocol.PhaseReduce && !st.State.Terminal() {
			if p, err := c.Store.Props(ctx, protocol.MapManifestBlob(st.ID)); err == nil {
				add("map done", p.Modified)
			}
		}
		if st.State == jobs.StateSucceeded {
			if p, err := c.Store.Props(ctx, protocol.ResultBlob(st.ID)); err == nil {
				add("reduce done", p.Modified)
			}
		}
	}
	if st.FinishedAt != nil {
		add("finished", *st.FinishedAt)
	}
	return out
}
