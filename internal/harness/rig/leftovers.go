package rig

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/harness/cluster"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// Leftovers lists what a finished job left behind: its active marker, its messages on the shards
// and results streams, and any message on the job queue. It waits up to 15 s for each to go (the
// leader cleans up after the final checkpoint).
func Leftovers(ctx context.Context, c *cluster.Cluster, ids []string) []string {
	q, err := queue.New(c.ConnStr, c.QueueName())
	if err != nil {
		return []string{"job queue: " + err.Error()}
	}
	jobsC := store.New(c.Blob(), c.JobsContainer())
	until := time.Now().Add(15 * time.Second)
	names := c.Names()
	for {
		var out []string
		for _, id := range ids {
			if ok, err := jobsC.Exists(ctx, protocol.ActiveBlob(id)); err != nil {
				out = append(out, fmt.Sprintf("active marker of %s unreadable: %v", id, err))
			} else if ok {
				out = append(out, "active marker "+protocol.ActiveBlob(id))
			}
			for _, s := range []struct{ stream, subject string }{
				{names.ShardStream(), names.ShardSubject(id)}, {names.ResultStream(), names.ResultSubject(id)},
			} {
				if n, err := StreamCount(ctx, c, s.stream, s.subject); err != nil {
					out = append(out, fmt.Sprintf("%s unreadable: %v", s.stream, err))
				} else if n > 0 {
					out = append(out, fmt.Sprintf("%d messages on %s (%s)", n, s.stream, s.subject))
				}
			}
		}
		if n, err := q.Depth(ctx); err != nil {
			out = append(out, fmt.Sprintf("job queue unreadable: %v", err))
		} else if n > 0 {
			out = append(out, fmt.Sprintf("%d messages on the job queue", n))
		}
		if len(out) == 0 || time.Now().After(until) || ctx.Err() != nil {
			return out
		}
		_ = Sleep(ctx, 500*time.Millisecond)
	}
}

// StreamCount counts the messages of c's stream on subject.
func StreamCount(ctx context.Context, c *cluster.Cluster, stream, subject string) (uint64, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	js, err := jetstream.New(c.Bus.Conn())
	if err != nil {
		return 0, err
	}
	s, err := js.Stream(sctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(sctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// DeadLetters counts the dead letters from source ("results", "shards", "queue"), waiting up to
// 15 s for want of them (the leader reads the queue every few seconds).
func DeadLetters(ctx context.Context, c *cluster.Cluster, source string, want uint64) uint64 {
	until := time.Now().Add(15 * time.Second)
	for {
		n, _ := StreamCount(ctx, c, c.Names().DeadStream(), c.Names().DeadSubject(source))
		if n >= want || time.Now().After(until) || ctx.Err() != nil {
			return n
		}
		_ = Sleep(ctx, 500*time.Millisecond)
	}
}

// WaitGone waits up to within for blob name of sc to be deleted.
func WaitGone(ctx context.Context, sc *store.Container, name string, within time.Duration) error {
	until := time.Now().Add(within)
	for {
		ok, err := sc.Exists(ctx, name)
		switch {
		case err == nil && !ok:
			return nil
		case err == nil:
			err = fmt.Errorf("%s still there after %v", name, within)
		}
		if time.Now().After(until) || ctx.Err() != nil {
			return err
		}
		_ = Sleep(ctx, 250*time.Millisecond)
	}
}
