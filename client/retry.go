package client

import (
	"context"
	"fmt"

	"github.com/mapagg/mapagg/internal/jobstore"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Retry submits a failed or cancelled job again under a new id: a copy of its whole spec
// (priority, schedule, retries, dependencies, params), naming the original (retry_of), as the
// leader's automatic retry does. It returns the new id.
func (c *Client) Retry(ctx context.Context, id string) (string, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return "", err
	}
	if st.State != jobs.StateFailed && st.State != jobs.StateCancelled {
		return "", fmt.Errorf("job %s is %s: only a failed or cancelled job can be retried", id, st.State)
	}
	js := c.jobStore()
	old, err := js.Spec(ctx, id)
	if err != nil {
		return "", fmt.Errorf("read spec: %w", err)
	}
	// Its type and parameters are validated again: the cluster's build may have changed since.
	if err := c.check(ctx, old.Type, old.Params); err != nil {
		return "", err
	}
	if err := c.checkInput(ctx, old.Type, old.Params); err != nil {
		return "", err
	}
	now := c.now()
	spec := jobstore.RetrySpec(old, protocol.NewID(now), now)
	if err := js.Submit(ctx, spec); err != nil {
		return "", err
	}
	return spec.ID, nil
}
