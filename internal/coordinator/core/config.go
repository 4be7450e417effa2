package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Config configures a Coordinator. Zero fields take their defaults (DefaultConfig).
type Config struct {
	// CheckpointInterval is how often dirty jobs are checkpointed (and their results acked). A
	// job whose checkpoint is costly is checkpointed less often: after 10 × what its last
	// checkpoint took, up to 50 × CheckpointInterval. A job's last result is checkpointed at once.
	// Default 200ms.
	CheckpointInterval time.Duration
	// CheckpointEvery checkpoints sooner once this many merged results wait for a checkpoint.
	// It must stay below the bus's ResultsMaxAckPending. Default 8192.
	CheckpointEvery int
	// QueuePoll is how often the job queue is polled while idle (a submit also wakes intake over
	// NATS). Default 500ms.
	QueuePoll time.Duration
	// QueueVisibility hides a received job message from other leaders; intake extends it every
	// third of it while it plans (when the queue can), so a dead leader's messages come back
	// within it. Default 3s, at least 2s.
	QueueVisibility time.Duration
	// QueueCutOff hands the lease over (Healthy fails) when intake has not reached the job queue
	// for this long: another worker may reach it. Negative: never. Default 20s.
	QueueCutOff time.Duration
	// MaxQueueDequeues dead-letters a queue message received this many times without being
	// planned. Default 5.
	MaxQueueDequeues int64
	// RescanInterval is how often active jobs and cancel markers are re-read from storage (a
	// backstop for lost NATS hints and for jobs planned by a deposed leader). Default 5s.
	RescanInterval time.Duration
	// DispatchBatch is how many shards are published per JetStream round of acks. Default 1024.
	DispatchBatch int
	// DispatchWindow bounds how many shards of one job are dispatched and not yet merged (queued
	// on JetStream or running): the shards stream's backlog of a job never exceeds it, whatever
	// the job's size. It must be at least DispatchBatch. Default 16384.
	DispatchWindow int
	// FairHorizon is how much queued work of a type the leader keeps in the shards stream. That is
	// the type's measured merge rate × (FairHorizon + 2 × its median shard time) shards, at least
	// FairMinShards, at most DispatchWindow. It is split among the type's running jobs by priority.
	// A job submitted behind others of its type starts within about this long. Default 1s.
	FairHorizon time.Duration
	// FairMinShards is the least a type may have in the stream (before its rate is known).
	// Default 256.
	FairMinShards int
	// Partitions is a keyed job's reduce partitions when the job does not choose. Default
	// DefaultPartitions (8).
	Partitions int
	// ShardsPerMsg is how many consecutive shards of a job travel in one message, decided when
	// the job is planned (and kept in its checkpoint): 0 decides from the job's size (one each
	// below 4096 shards, else total/4096, 2 to 16). Default 0.
	ShardsPerMsg int
	// MaxActiveJobs bounds the jobs running at once; intake waits beyond it. Default 64.
	MaxActiveJobs int
	// StallTimeout: Healthy reports an error when the main loop has not turned for this long, so
	// the elector stops renewing a lease held by a stuck coordinator. Default 10s.
	StallTimeout time.Duration
	// ResultsPrefetch is how many results the leader pulls ahead. Default 2048.
	ResultsPrefetch int
	// NoBackupTasks turns off backup tasks. Near a job's end (every shard dispatched, at most a
	// quarter left), a shard held much longer than its peers (2 × the median shard time, at least
	// 100ms) is dispatched once more. So a slow worker does not hold the job up. The first result
	// of each wins and the other is dropped as a duplicate (see the package doc). Default false
	// (on).
	NoBackupTasks bool
	// RepairInterval is how often the leader looks for running jobs whose missing shards are
	// nowhere, and dispatches them again. Such shards are neither queued, running nor waiting as
	// results: a storage rollback, a purge or a lost JetStream write lost them. Two looks in a row
	// must agree, so a lost shard is repaired within about 2-3 × RepairInterval. Default 2s.
	RepairInterval time.Duration
	// RepairRounds is how many repair rounds without a merge a job gets before it fails with a
	// reason naming its missing shards. Default 5.
	RepairRounds int
	// RepairMaxShards bounds the shards of one job one repair round dispatches. Default 4096.
	RepairMaxShards int
	// ScheduleInterval is how often the leader reads the schedules (it also wakes at each next
	// tick). Default 1s.
	ScheduleInterval time.Duration
	// RetryBackoff is the delay before a failed job's first automatic retry (--retries); it
	// doubles with each retry, up to 10m. Default 5s.
	RetryBackoff time.Duration
	// RetainSucceeded and RetainFailed: a job that succeeded (failed or was cancelled) is
	// deleted this long after it ended; 0 keeps it. Default 0 (the worker binary sets 7 and 30
	// days).
	RetainSucceeded, RetainFailed time.Duration
	// RetentionInterval is how often expired jobs are looked for; RetentionBatch bounds the jobs
	// one look deletes (a rate limit). Defaults 1m and 100.
	RetentionInterval time.Duration
	RetentionBatch    int
	// Registry resolves job types. Default jobs.Default().
	Registry *jobs.Registry
	// TypeHolders, when set, names the live workers that have a job type (from membership): a
	// job whose type this leader lacks waits, and its reason names them. Default: none known.
	TypeHolders func(typ string) []string
	// Slots, when set, is how many tasks of a job type the live workers run at once (their
	// concurrency, summed; from membership): Split sees it as the Env's jobs.SlotsEnv, and a blob
	// input's default ranges are sized by it. Default: unknown (0).
	Slots func(typ string) int
	// OnEvent, when set, is called with every event of the coordinator (term started, first merge,
	// job planned/resumed/finished/waiting, job code failed, dead-lettered message, term ended):
	// the typed counterpart of its Info logs. It must return quickly without blocking.
	OnEvent func(Event)
	// Metrics receives merges, dropped duplicates and checkpoint writes (package observe).
	// Default: none.
	Metrics Metrics
	// Logger receives logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time

	// keepResultMax: a succeeded job whose final checkpoint holds at most this many bytes of
	// result and done set keeps them there after its result copy is stored (result.go). 0:
	// defaultKeepResultMax; negative: always dropped (tests of the rewrite).
	// KeepResultMax: a final checkpoint keeps a succeeded job's result up to this many bytes
	// (0: 4 KiB; below 0: none). For tests.
	KeepResultMax int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		CheckpointInterval: 200 * time.Millisecond, CheckpointEvery: 8192, QueuePoll: 500 * time.Millisecond,
		QueueVisibility: 3 * time.Second, QueueCutOff: 20 * time.Second, MaxQueueDequeues: 5, RescanInterval: 5 * time.Second,
		DispatchBatch: 1024, DispatchWindow: 16384, MaxActiveJobs: 64, StallTimeout: 10 * time.Second, ResultsPrefetch: 2048,
		RepairInterval: 2 * time.Second, RepairRounds: 5, RepairMaxShards: 4096,
		ScheduleInterval: time.Second, RetryBackoff: 5 * time.Second, RetentionInterval: time.Minute, RetentionBatch: 100,
		FairHorizon: time.Second, FairMinShards: 256,
	}
}

// WithDefaults sets every zero field to its default: the one place defaults are applied.
func (c Config) WithDefaults() Config {
	d := DefaultConfig()
	c.CheckpointInterval = cmp.Or(c.CheckpointInterval, d.CheckpointInterval)
	c.CheckpointEvery = cmp.Or(c.CheckpointEvery, d.CheckpointEvery)
	c.Partitions = cmp.Or(c.Partitions, DefaultPartitions)
	c.QueuePoll = cmp.Or(c.QueuePoll, d.QueuePoll)
	c.QueueVisibility = cmp.Or(c.QueueVisibility, d.QueueVisibility)
	// Zero means the default; a negative QueueCutOff (never) is kept.
	if c.QueueCutOff == 0 {
		c.QueueCutOff = d.QueueCutOff
	}
	c.MaxQueueDequeues = cmp.Or(c.MaxQueueDequeues, d.MaxQueueDequeues)
	c.RescanInterval = cmp.Or(c.RescanInterval, d.RescanInterval)
	c.DispatchBatch = cmp.Or(c.DispatchBatch, d.DispatchBatch)
	c.DispatchWindow = cmp.Or(c.DispatchWindow, d.DispatchWindow)
	c.MaxActiveJobs = cmp.Or(c.MaxActiveJobs, d.MaxActiveJobs)
	c.StallTimeout = cmp.Or(c.StallTimeout, d.StallTimeout)
	c.ResultsPrefetch = cmp.Or(c.ResultsPrefetch, d.ResultsPrefetch)
	c.RepairInterval = cmp.Or(c.RepairInterval, d.RepairInterval)
	c.RepairRounds = cmp.Or(c.RepairRounds, d.RepairRounds)
	c.RepairMaxShards = cmp.Or(c.RepairMaxShards, d.RepairMaxShards)
	c.ScheduleInterval = cmp.Or(c.ScheduleInterval, d.ScheduleInterval)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, d.RetryBackoff)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, d.RetentionInterval)
	c.RetentionBatch = cmp.Or(c.RetentionBatch, d.RetentionBatch)
	c.FairHorizon = cmp.Or(c.FairHorizon, d.FairHorizon)
	c.FairMinShards = cmp.Or(c.FairMinShards, d.FairMinShards)
	c.Registry = cmp.Or(c.Registry, jobs.Default())
	c.Logger = cmp.Or(c.Logger, slog.Default())
	if c.Now == nil { // a func: not comparable, so no cmp.Or
		c.Now = time.Now
	}
	c.Metrics = cmp.Or[Metrics](c.Metrics, noMetrics{})
	return c
}

// ErrInvalidConfig is matched by every error Validate returns.
// DefaultPartitions is a keyed job's partition count when neither the job nor the cluster
// chooses one.
const DefaultPartitions = 8

// ErrRetryClaim: a checkpoint was changed by an older epoch; re-read it.
var ErrRetryClaim = errors.New("checkpoint changed by an older epoch; re-read")

var ErrInvalidConfig = errors.New("coordinator: invalid config")

// Validate reports every impossible setting and what to change (zero fields are valid: they
// take their defaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if c.CheckpointInterval < time.Millisecond || c.CheckpointInterval > time.Minute {
		add("CheckpointInterval %v: use 1ms to 1m (default 200ms)", c.CheckpointInterval)
	}
	if c.CheckpointEvery < 1 {
		add("CheckpointEvery %d: use at least 1, below the bus's ResultsMaxAckPending (default 8192)", c.CheckpointEvery)
	}
	if c.QueuePoll < time.Millisecond {
		add("QueuePoll %v: use at least 1ms (default 500ms)", c.QueuePoll)
	}
	if c.QueueVisibility < 2*time.Second {
		add("QueueVisibility %v: use at least 2s (default 3s)", c.QueueVisibility)
	}
	if c.MaxQueueDequeues < 1 {
		add("MaxQueueDequeues %d: use at least 1 (default 5)", c.MaxQueueDequeues)
	}
	if c.ScheduleInterval < 10*time.Millisecond || c.ScheduleInterval > time.Minute {
		add("ScheduleInterval %v: use 10ms to 1m (default 1s)", c.ScheduleInterval)
	}
	if c.RetainSucceeded < 0 || c.RetainFailed < 0 {
		add("RetainSucceeded %v, RetainFailed %v: use 0 (keep) or more", c.RetainSucceeded, c.RetainFailed)
	}
	if c.RetentionInterval < 10*time.Millisecond || c.RetentionBatch < 1 {
		add("RetentionInterval %v, RetentionBatch %d: use at least 10ms and 1 (defaults 1m, 100)", c.RetentionInterval, c.RetentionBatch)
	}
	if c.RetryBackoff < 0 || c.RetryBackoff > time.Hour {
		add("RetryBackoff %v: use 0 to 1h (default 5s)", c.RetryBackoff)
	}
	if c.RescanInterval < 10*time.Millisecond {
		add("RescanInterval %v: use at least 10ms (default 5s)", c.RescanInterval)
	}
	if c.DispatchBatch < 1 || c.DispatchBatch > 65536 {
		add("DispatchBatch %d: use 1 to 65536 (default 1024)", c.DispatchBatch)
	}
	if c.DispatchWindow < max(c.DispatchBatch, c.ShardsPerMsg) {
		add("DispatchWindow %d: use at least DispatchBatch (%d) and ShardsPerMsg (%d) (default 16384)", c.DispatchWindow, c.DispatchBatch, c.ShardsPerMsg)
	}
	if c.Partitions < 1 || c.Partitions > jobs.MaxPartitions {
		add("Partitions %d: use 1 to %d (default %d)", c.Partitions, jobs.MaxPartitions, DefaultPartitions)
	}
	if c.ShardsPerMsg < 0 || c.ShardsPerMsg > protocol.MaxShardBatch {
		add("ShardsPerMsg %d: use 0 (decide from the job's size) to %d", c.ShardsPerMsg, protocol.MaxShardBatch)
	}
	if c.FairHorizon < 10*time.Millisecond {
		add("FairHorizon %v: use at least 10ms (default 1s)", c.FairHorizon)
	}
	if c.FairMinShards < 1 {
		add("FairMinShards %d: use at least 1 (default 256)", c.FairMinShards)
	}
	if c.MaxActiveJobs < 1 {
		add("MaxActiveJobs %d: use at least 1 (default 64)", c.MaxActiveJobs)
	}
	if c.ResultsPrefetch < 1 {
		add("ResultsPrefetch %d: use at least 1 (default 2048)", c.ResultsPrefetch)
	}
	if c.RepairInterval < 10*time.Millisecond {
		add("RepairInterval %v: use at least 10ms (default 2s)", c.RepairInterval)
	}
	if c.RepairRounds < 1 {
		add("RepairRounds %d: use at least 1 (default 5)", c.RepairRounds)
	}
	if c.RepairMaxShards < 1 {
		add("RepairMaxShards %d: use at least 1 (default 4096)", c.RepairMaxShards)
	}
	if c.StallTimeout <= c.CheckpointInterval {
		add("StallTimeout %v: use more than CheckpointInterval (%v) (default 10s)", c.StallTimeout, c.CheckpointInterval)
	}
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, strings.Join(probs, "; "))
}

// Store is the jobs container (store.Container).
type Store interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
	// PutMeta is Put that also sets the blob's metadata (checkpoints carry their status record).
	PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond store.Cond) (store.ETag, error)
	Delete(ctx context.Context, name string) error
	Exists(ctx context.Context, name string) (bool, error)
	List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error)
	// Props reads a blob's metadata (a checkpoint's status record: dependencies, schedules).
	Props(ctx context.Context, name string) (store.Props, error)
}

// Queue is the job intake queue (queue.Queue).
type Queue interface {
	Receive(ctx context.Context, n int, visibility time.Duration) ([]queue.Message, error)
	Delete(ctx context.Context, m queue.Message) error
	Enqueue(ctx context.Context, text string) error // schedules and retries make jobs
	EnqueueAfter(ctx context.Context, text string, delay time.Duration) error
}

// Bus is what the leader needs of JetStream (bus.Bus).
type Bus interface {
	PublishAll(ctx context.Context, msgs []bus.Outgoing) error
	ShardTypeSubject(typ, job string) string
	PurgeJob(ctx context.Context, job string) error
	PurgeJobMessages(ctx context.Context, job string) error // shards and results (retention)
	OpenResults(ctx context.Context, epoch uint64, prefetch int) (*bus.Feed, error)
	DeadLetter(ctx context.Context, source string, data []byte, reason string) error
	JobBacklog(ctx context.Context, job string) (shards, results uint64, err error)
	Subscribe(subject string, fn func(data []byte)) (stop func(), err error)
}

var (
	_ Store = (*store.Container)(nil)
	_ Queue = (*queue.Queue)(nil)
	_ Bus   = (*bus.Bus)(nil)
)

// Sentinels.
var (
	// ErrDeposed: a checkpoint was written by a leader of a higher epoch. This coordinator stops.
	ErrDeposed = errors.New("deposed: a newer leader owns the job state")
	// ErrStalled: the main loop has not turned within StallTimeout.
	ErrStalled = errors.New("coordinator main loop stalled")
)

// Metrics receives measurements of the coordinator's work. Calls must return quickly.
type Metrics interface {
	ResultMerged()
	DuplicateDropped()
	CheckpointWritten(took time.Duration, bytes int, err error)
}

type noMetrics struct{}

func (noMetrics) ResultMerged()                               {}
func (noMetrics) DuplicateDropped()                           {}
func (noMetrics) CheckpointWritten(time.Duration, int, error) {}
