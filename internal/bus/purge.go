package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// PurgeJobMessages removes every message of job from the shards and the results streams (a
// deleted job leaves nothing behind).
func (b *Bus) PurgeJobMessages(ctx context.Context, job string) error {
	for _, p := range []struct{ stream, subject string }{
		{b.shardStream, b.names.ShardSubject(job)},
		{b.resultStream, b.names.ResultSubject(job)},
	} {
		s, err := b.stream(ctx, p.stream, "purge")
		if err != nil {
			return fmt.Errorf("purge %s: %w", job, err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(p.subject)); err != nil {
			return fmt.Errorf("purge %s: %w", job, err)
		}
	}
	return nil
}
