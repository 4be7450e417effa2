package client

import (
	"context"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// Retry submits a failed or cancelled job again with the same spec, under a new id; the new
// job's spec names the original (retry_of). It returns the new id.
func (c *Client) Retry(ctx context.Context, id string) (string, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return "", err
	}
	if st.State != jobs.StateFailed && st.State != jobs.StateCancelled {
		return "", fmt.Errorf("job %s is %s: only a failed or cancelled job can be retried", id, st.State)
	}
	data, _, err := c.Store.Get(ctx, protocol.SpecBlob(id))
	if err != nil {
		return "", fmt.Errorf("read spec: %w", err)
	}
	old, err := protocol.ParseSpec(data)
	if err != nil {
		return "", err
	}
	// Validated again: the cluster's build may have changed since.
	spec, err := c.validate(ctx, old.Type, old.Params)
	if err != nil {
		return "", err
	}
	spec.After, spec.Retries, spec.Schedule, spec.Tick, spec.RetryOf = old.After, old.Retries, old.Schedule, old.Tick, id
	return c.submitSpec(ctx, spec)
}
