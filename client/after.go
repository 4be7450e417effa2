package client

import (
	"context"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// WithAfter makes the job start once every one of these jobs succeeded; it fails if one fails,
// is cancelled or is deleted. Each must exist when the job is submitted.
func WithAfter(ids ...string) SubmitOption { return func(o *submitOptions) { o.after = ids } }

// WithRetries submits a failed job again, with backoff, up to n times (0 to 10).
func WithRetries(n int) SubmitOption { return func(o *submitOptions) { o.retries = n } }

// checkAfter makes sure every job in after exists (their ids are checked with the spec).
func (c *Client) checkAfter(ctx context.Context, after []string) error {
	for _, id := range after {
		if _, _, err := c.Store.Get(ctx, protocol.SpecBlob(id)); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("%w: %s (the job to run after)", ErrNoSuchJob, id)
			}
			return err
		}
	}
	return nil
}
