package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// SubmitOptions are what Submit does not ask: dependencies and automatic retries.
type SubmitOptions struct {
	// After: the job starts once every one of these jobs succeeded, and fails if one fails, is
	// cancelled or is deleted. Each must exist.
	After []string
	// Retries: a failed job is submitted again, with backoff, up to this many times (0 to 10).
	Retries int
}

// SubmitWith is Submit with options.
func (c *Client) SubmitWith(ctx context.Context, typ string, params json.RawMessage, o SubmitOptions) (string, error) {
	spec, err := c.Validate(ctx, typ, params)
	if err != nil {
		return "", err
	}
	if err := c.checkAfter(ctx, o.After); err != nil {
		return "", err
	}
	spec.After, spec.Retries = o.After, o.Retries
	if _, err := spec.Encode(); err != nil {
		return "", err
	}
	return c.submitSpec(ctx, spec)
}

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
