package bus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mapagg/mapagg/internal/protocol"
)

// Config names the streams and sets their limits. The zero value of a field takes its default.
type Config struct {
	// Prefix starts every stream name and subject (default "mapagg"): streams <PREFIX>_SHARDS,
	// <PREFIX>_RESULTS, <PREFIX>_DEAD; subjects <prefix>.shards.<type>.<job>, <prefix>.results.<job>.
	Prefix string
	// Replicas is the stream replica count (default 1; 3 on a production NATS cluster).
	Replicas int
	// ShardTimeout is the shards consumers' AckWait: a shard not acknowledged (or marked in
	// progress) within it is redelivered to another worker, so it is how long a dead worker's
	// shards wait. Live workers mark every shard they hold in progress every third of it, however
	// long the shard runs. Default 5s.
	ShardTimeout time.Duration
	// ResultsAckWait is the results consumer's AckWait. Default 60s (results wait for checkpoints).
	ResultsAckWait time.Duration
	// ResultsMaxAckPending bounds results the leader holds unacknowledged between checkpoints.
	// It must exceed result rate × checkpoint interval. Default 262144.
	ResultsMaxAckPending int
	// DuplicateWindow is how long JetStream remembers message ids. Default 10m.
	DuplicateWindow time.Duration
	// MemoryStorage keeps streams in memory instead of on disk (tests only). Default false.
	MemoryStorage bool
	// Keys authenticate shards and results (auth.go): every shard and result published carries a
	// MAC of the current key, and a delivery without a valid MAC of an accepted key is
	// dead-lettered, never handed on. Required to publish or consume shards and results (a
	// client that only submits, cancels or asks needs none). Default none.
	Keys *Keyring
	// OnRefused, when set, is called (from the feed's goroutine; keep it short) for every delivery
	// refused as unauthenticated, after it was dead-lettered: source is SourceShards or
	// SourceResults, err says why (naming key ids, never a secret). For logging and metrics.
	OnRefused func(source, subject string, err error)
	// OnRebuilt, when set, is called (on the goroutine that found it; keep it short) for every
	// stream or consumer this member found missing and created again (heal.go). For events and
	// metrics; a log line is written either way.
	OnRebuilt func(Rebuilt)
	// Logger takes the bus's own log lines (a stream or consumer recreated). Default
	// slog.Default().
	Logger *slog.Logger
	// ClusterKeyID, when set, returns the id of the key the cluster signs with ("" unknown; node
	// reads it from the lease blob). A shard signed with an unknown key goes back at once (nak)
	// while it may be the cluster's, and is dead-lettered as forged when the cluster's key is one
	// this member holds. Nil: always nak.
	ClusterKeyID func() string
	// ProbeInterval is how often Health sends a round trip (PING/PONG) to the server. Default 250ms.
	ProbeInterval time.Duration
	// CutOffAfter is how long without a round trip coming back makes Health report the process
	// cut off. It must stay below the election's suspicion timeout, so a cut-off follower knows
	// before it would suspect. Default 1s.
	CutOffAfter time.Duration
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Prefix: "mapagg", Replicas: 1, ShardTimeout: 5 * time.Second, ResultsAckWait: 60 * time.Second,
		ResultsMaxAckPending: 1 << 18, DuplicateWindow: 10 * time.Minute,
		ProbeInterval: 250 * time.Millisecond, CutOffAfter: time.Second}
}

// withDefaults sets every zero field to its default: the one place defaults are applied.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.Prefix = cmp.Or(c.Prefix, d.Prefix)
	c.Replicas = cmp.Or(c.Replicas, d.Replicas)
	c.ShardTimeout = cmp.Or(c.ShardTimeout, d.ShardTimeout)
	c.ResultsAckWait = cmp.Or(c.ResultsAckWait, d.ResultsAckWait)
	c.ResultsMaxAckPending = cmp.Or(c.ResultsMaxAckPending, d.ResultsMaxAckPending)
	c.DuplicateWindow = cmp.Or(c.DuplicateWindow, d.DuplicateWindow)
	c.ProbeInterval = cmp.Or(c.ProbeInterval, d.ProbeInterval)
	c.CutOffAfter = cmp.Or(c.CutOffAfter, d.CutOffAfter)
	return c
}

// ErrInvalidConfig is matched by every error Validate returns.
var ErrInvalidConfig = errors.New("bus: invalid config")

// Validate reports every impossible setting and what to change (zero fields are valid: they take
// their defaults).
func (c Config) Validate() error {
	c = c.withDefaults()
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if !validPrefix(c.Prefix) {
		add("Prefix %q: use letters, digits, '-' and '_' only, up to 64 (default %q)", c.Prefix, "mapagg")
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		add("Replicas %d: use 1 to 5 (default 1; 3 on a production NATS cluster)", c.Replicas)
	}
	if c.ShardTimeout < time.Second {
		add("ShardTimeout %v: use at least 1s (default 5s)", c.ShardTimeout)
	}
	if c.ResultsAckWait < time.Second {
		add("ResultsAckWait %v: use at least 1s (default 60s)", c.ResultsAckWait)
	}
	if c.ResultsMaxAckPending < 1 {
		add("ResultsMaxAckPending %d: use at least 1 (default 262144)", c.ResultsMaxAckPending)
	}
	if c.DuplicateWindow < time.Minute {
		add("DuplicateWindow %v: use at least 1m, it must outlast a failover (default 10m)", c.DuplicateWindow)
	}
	if c.ProbeInterval < 10*time.Millisecond {
		add("ProbeInterval %v: use at least 10ms (default 250ms)", c.ProbeInterval)
	} else if c.CutOffAfter < 2*c.ProbeInterval {
		add("CutOffAfter %v: use at least two probe intervals (%v) (default 1s)", c.CutOffAfter, 2*c.ProbeInterval)
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(probs, "; "))
}

func validPrefix(p string) bool {
	if p == "" || len(p) > 64 {
		return false
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Control subjects (core NATS, fire-and-forget hints; correctness never depends on them).
const (
	CtlReleased  = protocol.CtlReleased  // the leader released the lease: followers acquire now
	CtlSubmitted = protocol.CtlSubmitted // a job was enqueued: the leader polls the queue now
	CtlCancel    = protocol.CtlCancel    // data = job id: the leader cancels it now
)

// Bus is a connection to NATS with the project's streams.
type Bus struct {
	cfg                       Config
	nc                        *nats.Conn
	js                        jetstream.JetStream
	names                     protocol.Names
	shardStream, resultStream string
	deadStream                string
	refused                   atomic.Uint64 // deliveries refused as unauthenticated
	unknownKey                atomic.Uint64 // shards handed back: signed with a key this member lacks
	rebuilds                  atomic.Uint64 // streams and consumers recreated (heal.go)
	healer                    healer
	health                    Health
}

// Connect dials NATS at url (comma-separated for a cluster) as client name; opts (Auth.Options)
// add credentials and TLS. The connection's events (disconnect, reconnect, close, slow consumer)
// are logged through slog.Default(), or the logger of ConnEvents passed in opts. Settings the
// server cannot honour fail with ErrMisconfigured.
func Connect(url, name string, cfg Config, opts ...nats.Option) (*Bus, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	base := append([]nats.Option{nats.Name(name), nats.MaxReconnects(-1), nats.ReconnectWait(250 * time.Millisecond), nats.CustomReconnectDelay(reconnectDelay),
		nats.RetryOnFailedConnect(false), nats.Timeout(5 * time.Second)}, ConnEvents(slog.Default())...)
	nc, err := nats.Connect(url, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to nats at %s: %w", url, err)
	}
	if err := checkServer(nc, cfg); err != nil {
		nc.Close()
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096), jetstream.WithPublishAsyncTimeout(PublishAckTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	n := protocol.NewNames(cfg.Prefix)
	return &Bus{
		cfg: cfg, nc: nc, js: js, names: n,
		shardStream: n.ShardStream(), resultStream: n.ResultStream(), deadStream: n.DeadStream(),
	}, nil
}

// Close drains nothing and closes the connection.
func (b *Bus) Close() { b.health.stop(); b.nc.Close() }

// Conn is the underlying NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// Config returns the effective configuration.
func (b *Bus) Config() Config { return b.cfg }

const legacyWorkersConsumer = "workers"
const leaderConsumer = "leader"

// Ensure creates or updates the streams (the per-type shard consumers are created by the workers
// that pull from them, see Shards). Every process calls it at start; concurrent calls with the
// same configuration all succeed. A stream removed later is created again by the member that
// finds it missing (Heal).
func (b *Bus) Ensure(ctx context.Context) error {
	for _, sc := range b.streamConfigs() {
		if _, err := b.ensureStream(ctx, sc); err != nil {
			return fmt.Errorf("ensure stream %s: %w", sc.Name, err)
		}
	}
	// The one shared consumer of earlier releases filtered every shard; its filter would overlap
	// the per-type consumers, which a work-queue stream refuses.
	if err := b.js.DeleteConsumer(ctx, b.shardStream, legacyWorkersConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("remove the legacy consumer %s: %w", legacyWorkersConsumer, err)
	}
	return nil
}

// streamConfigs are the cluster's streams.
func (b *Bus) streamConfigs() []jetstream.StreamConfig {
	storage := jetstream.FileStorage
	if b.cfg.MemoryStorage {
		storage = jetstream.MemoryStorage
	}
	return []jetstream.StreamConfig{
		{Name: b.shardStream, Subjects: []string{b.names.ShardSubject(">")}, Retention: jetstream.WorkQueuePolicy,
			Storage: storage, Replicas: b.cfg.Replicas, Duplicates: b.cfg.DuplicateWindow, Discard: jetstream.DiscardOld},
		{Name: b.resultStream, Subjects: []string{b.names.ResultSubject(">")}, Retention: jetstream.WorkQueuePolicy,
			Storage: storage, Replicas: b.cfg.Replicas, Duplicates: b.cfg.DuplicateWindow},
		{Name: b.deadStream, Subjects: []string{b.names.DeadSubject(">")}, Retention: jetstream.LimitsPolicy,
			Storage: storage, Replicas: b.cfg.Replicas, MaxAge: 7 * 24 * time.Hour, MaxMsgs: 100_000},
	}
}

// ensureStream creates sc, or updates it when it exists with other settings, and reports whether
// this call created it. A stream that already has them is left alone: every process calls Ensure
// at start. An update that changes nothing still makes the server rewrite the stream's
// configuration under its consumers, and nats-server 2.15's file store races there with a
// consumer being created.
func (b *Bus) ensureStream(ctx context.Context, sc jetstream.StreamConfig) (created bool, err error) {
	s, err := b.js.Stream(ctx, sc.Name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = b.js.CreateStream(ctx, sc)
		if !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return err == nil, err
		}
		_, err = b.js.CreateOrUpdateStream(ctx, sc) // created meanwhile by another process
		return false, err
	case err != nil:
		return false, err
	}
	if sameStream(s.CachedInfo().Config, sc) {
		return false, nil
	}
	_, err = b.js.UpdateStream(ctx, sc)
	return false, err
}

// sameStream reports whether have already has every setting Ensure asks for in want.
func sameStream(have, want jetstream.StreamConfig) bool {
	return slices.Equal(have.Subjects, want.Subjects) && have.Retention == want.Retention &&
		have.Storage == want.Storage && have.Replicas == want.Replicas &&
		(want.Duplicates == 0 || have.Duplicates == want.Duplicates) && have.Discard == want.Discard &&
		(want.MaxAge == 0 || have.MaxAge == want.MaxAge) && (want.MaxMsgs == 0 || have.MaxMsgs == want.MaxMsgs)
}

func (b *Bus) workersConsumerConfig(typ string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable: b.names.WorkersConsumer(typ), AckPolicy: jetstream.AckExplicitPolicy, AckWait: b.cfg.ShardTimeout,
		// Unlimited deliveries: the worker enforces the attempt limit from the delivery count, so a
		// shard whose every attempt crashed still reaches a live worker, which reports the failure.
		MaxDeliver: -1, MaxAckPending: 65536, FilterSubject: b.names.ShardTypeFilter(typ),
		MaxWaiting: 4096,
	}
}

// ShardSubject is the filter matching every shard of job (whatever its type); ShardSubject(">")
// matches every shard.
func (b *Bus) ShardSubject(job string) string { return b.names.ShardSubject(job) }

// ShardTypeSubject is the subject a shard of job, of job type typ, is published on.
func (b *Bus) ShardTypeSubject(typ, job string) string { return b.names.ShardTypeSubject(typ, job) }

// ResultSubject is the subject of job's results.
func (b *Bus) ResultSubject(job string) string { return b.names.ResultSubject(job) }

// PublishAckTimeout bounds the wait for JetStream's acknowledgement of a publish. A stream
// leader that dies with its node never acknowledges; the publisher then publishes again (the
// same Nats-Msg-Id, so nothing is stored twice) and is answered once the stream has a new
// leader (JetStream's own election, about 6s in a 3-node cluster), not after 30s.
const PublishAckTimeout = 5 * time.Second

// ErrPublish wraps a failure to store a message in JetStream.
var ErrPublish = errors.New("publish not acknowledged")

// Outgoing is one message to publish with its deduplication id.
type Outgoing struct {
	Subject string
	MsgID   string
	Data    []byte
}

// PublishAll publishes msgs asynchronously and returns once JetStream has stored every one of them
// (or the first failure). Duplicates (same MsgID within DuplicateWindow) count as stored. Messages
// that no stream took (it was removed) are published again once the streams are recreated (Heal).
func (b *Bus) PublishAll(ctx context.Context, msgs []Outgoing) error {
	missing, err := b.publishAll(ctx, msgs)
	if err != nil || len(missing) == 0 {
		return err
	}
	if err := b.Heal(ctx, "publish"); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPublish, missing[0].MsgID, err)
	}
	missing, err = b.publishAll(ctx, missing)
	if err == nil && len(missing) > 0 {
		err = fmt.Errorf("%w: %s: %w", ErrPublish, missing[0].MsgID, jetstream.ErrNoStreamResponse)
	}
	return err
}

// publishAll publishes msgs and returns those no stream answered (StreamMissing), or the first
// other failure.
func (b *Bus) publishAll(ctx context.Context, msgs []Outgoing) (missing []Outgoing, err error) {
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		msg, id, err := b.sign(m)
		if err != nil {
			return nil, err
		}
		f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
		}
		futures = append(futures, f)
	}
	for i, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			if StreamMissing(err) {
				missing = append(missing, msgs[i])
				continue
			}
			return nil, fmt.Errorf("%w: %s: %w", ErrPublish, msgs[i].MsgID, err)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return missing, nil
}

// healTimeout bounds the recreation of streams a publish found missing.
const healTimeout = 10 * time.Second

// republish publishes m again, synchronously, after the streams were recreated: the first
// publish found no stream.
func (b *Bus) republish(m Outgoing) error {
	ctx, cancel := context.WithTimeout(context.Background(), healTimeout)
	defer cancel()
	if err := b.Heal(ctx, "publish"); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
	}
	msg, id, err := b.sign(m)
	if err != nil {
		return err
	}
	if _, err := b.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id)); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
	}
	return nil
}

// PublishAsync publishes one message and returns a channel that yields nil once JetStream stored
// it, or the error. A message no stream took is published again once the streams are recreated.
func (b *Bus) PublishAsync(m Outgoing) <-chan error {
	ch := make(chan error, 1)
	msg, id, err := b.sign(m)
	if err != nil {
		ch <- err
		return ch
	}
	f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		ch <- fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
		return ch
	}
	go func() {
		select {
		case <-f.Ok():
			ch <- nil
		case err := <-f.Err():
			if StreamMissing(err) {
				ch <- b.republish(m)
				return
			}
			ch <- fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
		}
	}()
	return ch
}

// Future is a publish in flight.
type Future struct {
	f jetstream.PubAckFuture
	b *Bus
	m Outgoing
}

// Wait returns nil once JetStream stored the message, or the error (at the latest after the
// client's publish timeout). A message no stream took is published again, synchronously, once
// the streams are recreated.
func (f Future) Wait() error {
	select {
	case <-f.f.Ok():
		return nil
	case err := <-f.f.Err():
		if StreamMissing(err) {
			return f.b.republish(f.m)
		}
		return fmt.Errorf("%w: %s: %w", ErrPublish, f.m.MsgID, err)
	}
}

// Publish starts publishing one message without a goroutine of its own; Wait on the future for
// its outcome. Futures resolve in publish order, so one goroutine can settle them in turn.
func (b *Bus) Publish(m Outgoing) (Future, error) {
	msg, id, err := b.sign(m)
	if err != nil {
		return Future{}, err
	}
	f, err := b.js.PublishMsgAsync(msg, jetstream.WithMsgID(id))
	if err != nil {
		return Future{}, fmt.Errorf("%w: %s: %w", ErrPublish, m.MsgID, err)
	}
	return Future{f: f, b: b, m: m}, nil
}

// PurgeJob removes every queued shard of job from the shards stream.
func (b *Bus) PurgeJob(ctx context.Context, job string) error {
	s, err := b.stream(ctx, b.shardStream, "purge")
	if err != nil {
		return fmt.Errorf("purge %s: %w", job, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(b.names.ShardSubject(job))); err != nil {
		return fmt.Errorf("purge %s: %w", job, err)
	}
	return nil
}

// QueuedShards returns how many shards wait in the shards stream (all jobs).
func (b *Bus) QueuedShards(ctx context.Context) (uint64, error) {
	s, err := b.stream(ctx, b.shardStream, "backlog")
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// maxReason bounds a dead letter's reason (it may quote outside input).
const maxReason = 1024

// DeadLetter stores a message that could not be processed, with the reason (clipped to 1 KB),
// for an operator.
func (b *Bus) DeadLetter(ctx context.Context, source string, data []byte, reason string) error {
	m := nats.NewMsg(b.names.DeadSubject(source))
	m.Data = data
	m.Header.Set("Reason", protocol.Clip(reason, maxReason))
	_, err := b.js.PublishMsg(ctx, m)
	if StreamMissing(err) {
		if herr := b.Heal(ctx, "dead-letter"); herr != nil {
			return fmt.Errorf("dead-letter: %w", errors.Join(err, herr))
		}
		_, err = b.js.PublishMsg(ctx, m)
	}
	if err != nil {
		return fmt.Errorf("dead-letter: %w", err)
	}
	return nil
}

// Announce publishes a control hint on core NATS (subject without the prefix, e.g. CtlReleased).
func (b *Bus) Announce(subject string, data []byte) error {
	if err := b.nc.Publish(b.names.Control(subject), data); err != nil {
		return err
	}
	return b.nc.Flush()
}

// Subscribe calls fn for every control hint on subject until the returned stop is called.
func (b *Bus) Subscribe(subject string, fn func(data []byte)) (stop func(), err error) {
	sub, err := b.nc.Subscribe(b.names.Control(subject), func(m *nats.Msg) { fn(m.Data) })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}
