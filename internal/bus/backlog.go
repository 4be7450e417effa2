package bus

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// JobBacklog returns how many messages of job are in the shards stream and in the results
// stream. Both are work queues: a message stays until it is acknowledged, so the counts cover
// shards queued or held by a worker, and results queued or held by the leader. Zero in both
// means nothing of the job is queued, running or waiting to be merged (self-repair).
func (b *Bus) JobBacklog(ctx context.Context, job string) (shards, results uint64, err error) {
	if shards, err = b.subjectCount(ctx, b.shardStream, b.names.ShardSubject(job)); err != nil {
		return 0, 0, err
	}
	if results, err = b.subjectCount(ctx, b.resultStream, b.names.ResultSubject(job)); err != nil {
		return 0, 0, err
	}
	return shards, results, nil
}

func (b *Bus) subjectCount(ctx context.Context, stream, filter string) (uint64, error) {
	s, err := b.stream(ctx, stream, "backlog")
	if err != nil {
		return 0, fmt.Errorf("stream %s: %w", stream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, fmt.Errorf("stream %s info for %s: %w", stream, filter, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}
