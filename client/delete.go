package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
)

// ErrRunning: the job has not ended; cancel it first.
var ErrRunning = errors.New("job has not ended")

// MessagePurger removes a job's messages from the streams (bus.Bus). Client.Notify is used as
// one when it is.
type MessagePurger interface {
	PurgeJobMessages(ctx context.Context, job string) error
}

// Delete removes everything a finished job left: its stream messages (when Notify can purge
// them), its spec, checkpoint, plan pages, result, outputs and markers. A job that has not ended
// is refused (ErrRunning): cancel it first. Deleting a deleted job is ErrNoSuchJob.
func (c *Client) Delete(ctx context.Context, id string) error {
	st, err := c.Status(ctx, id)
	if err != nil {
		return err
	}
	if !st.State.Terminal() {
		return fmt.Errorf("%w: job %s is %s: cancel it first (`cancel %s`), then delete it", ErrRunning, id, st.State, id)
	}
	l, err := c.lister()
	if err != nil {
		return err
	}
	if p, ok := c.Notify.(MessagePurger); ok {
		if err := p.PurgeJobMessages(ctx, id); err != nil {
			return err
		}
	}
	// Twice: a leader's clean-up finishing as the job is deleted may write its result copy.
	for range 2 {
		blobs, err := l.List(ctx, id+"/")
		if err != nil {
			return err
		}
		for _, b := range blobs {
			if b.Name == protocol.SpecBlob(id) {
				continue // last: the job exists until everything else is gone
			}
			if err := c.Store.Delete(ctx, b.Name); err != nil {
				return fmt.Errorf("delete %s: %w", b.Name, err)
			}
		}
	}
	if err := c.Store.Delete(ctx, protocol.ActiveBlob(id)); err != nil {
		return err
	}
	at := st.UpdatedAt
	if st.FinishedAt != nil {
		at = st.FinishedAt
	}
	if at != nil {
		if err := c.Store.Delete(ctx, protocol.EndedBlob(id, st.State, *at)); err != nil {
			return err
		}
	}
	return c.Store.Delete(ctx, protocol.SpecBlob(id))
}
