package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A stream or consumer can vanish under a running cluster: an operator's `nats stream rm`, a
// server that lost its store. The member that finds one missing creates it again, idempotently
// (Ensure's own settings; concurrent creators all succeed), says so in a log line and a Rebuilt
// event naming what was missing, and goes on. Nothing here ends a term or a feed for it.

// Rebuilt is a stream or consumer this member found missing and created again.
type Rebuilt struct {
	// Kind is "stream" or "consumer".
	Kind string
	// Name of the stream, or of the consumer (Stream says on which stream).
	Name   string
	Stream string
	// Where it was found missing: "publish", "shards feed", "results feed", "purge", …
	Where string
}

func (r Rebuilt) String() string {
	if r.Kind == "consumer" {
		return fmt.Sprintf("consumer %s on stream %s (found missing by %s)", r.Name, r.Stream, r.Where)
	}
	return fmt.Sprintf("stream %s (found missing by %s)", r.Name, r.Where)
}

// healer serializes Bus.Heal and tells the member's feeds when something was rebuilt.
type healer struct {
	mu   sync.Mutex
	last time.Time // when the last check of every stream started

	sigMu sync.Mutex
	sig   chan struct{} // closed (and replaced) when this member rebuilds a stream or consumer
}

// rebuiltSignal returns a channel closed at this member's next rebuild. A shards feed's idle
// long poll listens to it: a pull parked on a deleted stream gets no answer from the server,
// and would otherwise wait for its missed heartbeats (10 s) to learn of it.
func (b *Bus) rebuiltSignal() <-chan struct{} {
	b.healer.sigMu.Lock()
	defer b.healer.sigMu.Unlock()
	if b.healer.sig == nil {
		b.healer.sig = make(chan struct{})
	}
	return b.healer.sig
}

// StreamMissing reports whether err says a stream is missing: JetStream's "stream not found", or
// a publish that no stream answered (no stream listens on its subject).
func StreamMissing(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrNoResponders)
}

// consumerMissing reports whether err says a consumer is missing or was deleted.
func consumerMissing(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}

// Heal creates every stream of the cluster that is missing, as Ensure does, and reports each
// one it created (log and Config.OnRebuilt). where names the caller that found one missing.
// A call that finds a check started after it was made returns at once: a burst of failing
// publishes checks the streams once or twice, not once a publish.
func (b *Bus) Heal(ctx context.Context, where string) error {
	asked := time.Now()
	b.healer.mu.Lock()
	defer b.healer.mu.Unlock()
	if b.healer.last.After(asked) {
		return nil
	}
	start := time.Now()
	for _, sc := range b.streamConfigs() {
		created, err := b.ensureStream(ctx, sc)
		if err != nil {
			return fmt.Errorf("recreate stream %s: %w", sc.Name, err)
		}
		if created {
			b.rebuilt(Rebuilt{Kind: "stream", Name: sc.Name, Where: where})
		}
	}
	b.healer.last = start
	return nil
}

// rebuilt logs r and hands it to Config.OnRebuilt.
func (b *Bus) rebuilt(r Rebuilt) {
	b.rebuilds.Add(1)
	b.healer.sigMu.Lock()
	if b.healer.sig != nil {
		close(b.healer.sig)
		b.healer.sig = nil
	}
	b.healer.sigMu.Unlock()
	lg := b.cfg.Logger
	if lg == nil {
		lg = slog.Default()
	}
	lg.Warn("a JetStream "+r.Kind+" was missing; recreated it", "kind", r.Kind, "name", r.Name,
		"stream", r.Stream, "found_by", r.Where)
	if f := b.cfg.OnRebuilt; f != nil {
		f(r)
	}
}

// Rebuilds counts the streams and consumers this member recreated.
func (b *Bus) Rebuilds() uint64 { return b.rebuilds.Load() }

// stream returns the stream name, recreating the cluster's streams first when it is missing.
func (b *Bus) stream(ctx context.Context, name, where string) (jetstream.Stream, error) {
	s, err := b.js.Stream(ctx, name)
	if !errors.Is(err, jetstream.ErrStreamNotFound) {
		return s, err
	}
	if herr := b.Heal(ctx, where); herr != nil {
		return nil, errors.Join(err, herr)
	}
	return b.js.Stream(ctx, name)
}

// healConsumer creates the consumer cc on stream again after it was found missing (the stream
// too, when it is gone), and reports it.
func (b *Bus) healConsumer(ctx context.Context, stream string, cc jetstream.ConsumerConfig, where string) (jetstream.Consumer, error) {
	s, err := b.stream(ctx, stream, where)
	if err != nil {
		return nil, err
	}
	c, err := s.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return nil, err
	}
	b.rebuilt(Rebuilt{Kind: "consumer", Name: cc.Durable, Stream: stream, Where: where})
	return c, nil
}
