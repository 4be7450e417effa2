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

// checkAfter makes sure every job in after exists, once.
func (c *Client) checkAfter(ctx context.Context, after []string) error {
	seen := map[string]bool{}
	for _, id := range after {
		if seen[id] {
			return fmt.Errorf("%w: job %s is named twice in after", protocol.ErrBadSpec, id)
		}
		seen[id] = true
		if err := protocol.CheckID(id); err != nil {
			return fmt.Errorf("after: %w", err)
		}
		if _, _, err := c.Store.Get(ctx, protocol.SpecBlob(id)); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				return fmt.Errorf("%w: %s (the job to run after)", ErrNoSuchJob, id)
			}
			return err
		}
	}
	return nil
}
