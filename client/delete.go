package client

import (
	"context"

	"github.com/mapagg/mapagg/internal/jobstore"
)

// ErrRunning: the job has not ended; cancel it first.
var ErrRunning = jobstore.ErrRunning

// messagePurger removes a job's messages from the streams (bus.Bus). Client.Notify is used as
// one when it is.
type messagePurger interface {
	PurgeJobMessages(ctx context.Context, job string) error
}

// Delete removes everything a finished job left: its stream messages (when Notify can purge
// them), its spec, checkpoint, plan pages, result, outputs and markers. A job that has not ended
// is refused (ErrRunning): cancel it first. Deleting a deleted job is ErrNoSuchJob.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.jobStore().Delete(ctx, id)
}
