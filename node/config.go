package node

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/coordinator"
	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/store"
	"github.com/mapagg/mapagg/worker"
)

// Config configures a running node (`worker run`, Node.Serve). Zero fields take their defaults
// (DefaultConfig) in Serve; Validate checks the values as given after defaulting. Each field is
// set by the `run` flag named in its comment, or by the flag's environment variable.
type Config struct {
	// Retention: how long the leader keeps finished jobs before deleting them. Nil:
	// DefaultRetention (7 days succeeded, 30 days failed); a zero field keeps them. --retention.
	Retention *Retention

	// Storage says how to reach and authenticate to Azure Storage (blobs and the queue): a
	// connection string (account key; Azurite), or an account URL with Entra ID
	// (DefaultAzureCredential) or a SAS token. Required. --azure-connection-string,
	// --storage-account-url, --storage-queue-url, --storage-sas-file.
	Storage store.Account
	// NATSAuth holds the NATS credentials and TLS settings (creds file, nkey seed, user and
	// password, CA, client certificate). Default none. --nats-creds, --nats-user, --nats-tls-ca, ...
	NATSAuth client.NATSAuth
	// StreamReplicas is the JetStream streams' replica count: 1 on one server, 3 on a NATS
	// cluster; checked against the server at start. Default 1. --stream-replicas.
	StreamReplicas int
	// StreamStorage is "file" or "memory". Default "file". --stream-storage.
	StreamStorage string
	// NATSURL is the NATS server URL(s), comma-separated. Default nats://127.0.0.1:4222. --nats-url.
	NATSURL string
	// NATSDialer, when set, opens the member's connections to NATS (a test harness that closes
	// them under the member, as a process's death would). Default the standard dialer. No flag.
	NATSDialer nats.CustomDialer
	// JobsContainer holds job specs, checkpoints and results. Default "jobs". --jobs-container.
	JobsContainer string
	// Queue is the Azure Storage queue of submitted job ids. Default "jobs". --queue.
	Queue string
	// LeaseContainer holds the leader lease blob. Default "leader". --lease-container.
	LeaseContainer string
	// ClusterKeys authenticate shards and results between members (ParseClusterKeys). Default: read
	// from (or created in) the blob ClusterKeyBlob of LeaseContainer. --cluster-key-file or env
	// CLUSTER_KEY. Every member of a cluster must share it.
	ClusterKeys *ClusterKeys
	// StreamPrefix prefixes the JetStream streams and NATS subjects. Default "mapagg". --stream-prefix.
	StreamPrefix string

	// ID names this worker in the lease, logs and `worker types`. Default hostname-pid. --id.
	ID string
	// LeaseDuration is the leader lease, 15s to 60s. Default 15s. --lease-duration.
	LeaseDuration time.Duration
	// HeartbeatInterval is how often the leader publishes a heartbeat on NATS. Default 250ms.
	// --heartbeat-interval.
	HeartbeatInterval time.Duration
	// SuspicionTimeout: a follower that hears no heartbeat from the leader for this long breaks
	// its lease (fenced by the ETag of the leader's epoch stamp) and takes over. At least 4
	// heartbeat intervals, below the lease. Default 1.4s. --suspicion-timeout.
	SuspicionTimeout time.Duration
	// ProbeAfter: a follower that hears no heartbeat for this long probes the leader's term on
	// NATS. 0: 1.2 heartbeat intervals. --probe-after.
	ProbeAfter time.Duration
	// ProbeConfirm: how long every probe must find no responders (the leader's process is gone)
	// before a follower breaks its lease. 0: 100ms. --probe-confirm.
	ProbeConfirm time.Duration
	// WatchEvery: how often the leader's first successor probes its term while it beats, so a
	// crash is seen within it. 0: 50ms; negative: off. --watch-every.
	WatchEvery time.Duration
	// AcquireInterval is how often a follower tries to take the lease. Default 1s. --acquire-interval.
	AcquireInterval time.Duration
	// Concurrency is the number of shards processed at once. Default the number of CPUs. --concurrency.
	Concurrency int
	// MemoryBudget is the memory of keyed tasks on this worker, shared by its running tasks.
	// Default worker.DefaultMemoryBudget (an eighth of the machine's memory, at most 128 MiB). --memory-budget.
	MemoryBudget int64
	// Partitions is a keyed job's partition count when the job does not choose (the leader's
	// setting counts). Default coordinator.DefaultPartitions (8). --partitions.
	Partitions int
	// MaxAttempts is the attempts per shard before its job fails. Default 3. --max-attempts.
	MaxAttempts int
	// ShardTimeout: a shard not finished or marked in progress within it is redelivered.
	// Default 5s (bus.DefaultConfig; running shards are marked in progress meanwhile, so only a
	// dead worker's shards wait for it). --shard-timeout.
	ShardTimeout time.Duration
	// CheckpointInterval is how often the leader checkpoints running jobs. Default 200ms.
	// --checkpoint-interval.
	CheckpointInterval time.Duration
	// StartupTimeout bounds the wait for storage and NATS at start. Default 60s. --startup-timeout.
	StartupTimeout time.Duration
	// MapDelay is added to every map step, to slow jobs down for failover demos and tests.
	// Default 0. --map-delay.
	MapDelay time.Duration

	// HTTPAddr is the address of the HTTP server (/metrics, /healthz, /readyz, the dashboard at
	// /, /api/...); "off" disables it; 127.0.0.1:0 picks a free local port (logged). Default
	// DefaultHTTPAddr (":8080", for containers). --http-addr.
	HTTPAddr string
	// Pprof serves /debug/pprof/ on the HTTP server. Default false. --pprof.
	Pprof bool
	// DashboardCancel lets the dashboard's own page cancel jobs without the API token (same-origin
	// requests only). Default false. --dashboard-cancel.
	DashboardCancel bool
	// APITokenFile holds the bearer token that authorizes writes over HTTP (the /api/v1 job API,
	// the dashboard's actions). Default none: writes are refused. --api-token-file.
	APITokenFile string
	// APITokensFile holds named tokens with roles, one `NAME ROLE TOKEN` a line (roles read,
	// submit, admin), beside APITokenFile's admin token. Default none. --api-tokens-file.
	APITokensFile string
	// HTTPHosts are extra Host names the HTTP server answers (IP literals, localhost, names without
	// a dot and the host name always work; "*" allows any). Default none. --http-hosts.
	HTTPHosts []string
	// OTLPEndpoint is the OpenTelemetry collector's OTLP/HTTP URL that a job's spans go to
	// (internal/telemetry). Default none: OTEL_EXPORTER_OTLP_ENDPOINT or
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT decide, and without them tracing is off. --otlp-endpoint.
	OTLPEndpoint string

	// Programs are the programs this worker runs as job types, NAME=COMMAND each
	// (internal/program). One that is missing, not executable or fails its describe run at start
	// is left out, with an error log. --program (repeatable), env WORKER_PROGRAMS (one a line).
	Programs []string
	// ProgramTimeout bounds one run of a program. Default 30m. --program-timeout.
	ProgramTimeout time.Duration
	// ProgramEnv names the worker's variables passed on to programs. --program-env.
	ProgramEnv []string

	// Logger receives the node's logs. Default slog.Default(). --log-level sets the CLI's.
	Logger *slog.Logger
}

// DefaultConfig returns the defaults of every field but Storage.
func DefaultConfig() Config {
	return Config{
		NATSURL:            "nats://127.0.0.1:4222",
		JobsContainer:      "jobs",
		Queue:              "jobs",
		LeaseContainer:     "leader",
		StreamPrefix:       "mapagg",
		StreamReplicas:     1,
		StreamStorage:      "file",
		HTTPAddr:           DefaultHTTPAddr,
		ID:                 election.DefaultIdentity(),
		LeaseDuration:      15 * time.Second,
		AcquireInterval:    time.Second,
		HeartbeatInterval:  election.DefaultConfig().HeartbeatInterval,
		SuspicionTimeout:   election.DefaultConfig().SuspicionTimeout,
		Concurrency:        runtime.NumCPU(),
		MaxAttempts:        3,
		ShardTimeout:       bus.DefaultConfig().ShardTimeout,
		CheckpointInterval: 200 * time.Millisecond,
		StartupTimeout:     60 * time.Second,
		Logger:             slog.Default(),
	}
}

// fill sets every zero field to its default: the one place defaults are applied.
func (c *Config) fill() {
	d := DefaultConfig()
	c.NATSURL = cmp.Or(c.NATSURL, d.NATSURL)
	c.JobsContainer = cmp.Or(c.JobsContainer, d.JobsContainer)
	c.Queue = cmp.Or(c.Queue, d.Queue)
	c.LeaseContainer = cmp.Or(c.LeaseContainer, d.LeaseContainer)
	c.StreamPrefix = cmp.Or(c.StreamPrefix, d.StreamPrefix)
	c.StreamStorage = cmp.Or(c.StreamStorage, d.StreamStorage)
	c.HTTPAddr = cmp.Or(c.HTTPAddr, d.HTTPAddr)
	c.StreamReplicas = cmp.Or(c.StreamReplicas, d.StreamReplicas)
	c.ID = cmp.Or(c.ID, d.ID)
	c.LeaseDuration = cmp.Or(c.LeaseDuration, d.LeaseDuration)
	c.AcquireInterval = cmp.Or(c.AcquireInterval, d.AcquireInterval)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, d.HeartbeatInterval)
	c.SuspicionTimeout = cmp.Or(c.SuspicionTimeout, d.SuspicionTimeout)
	c.ShardTimeout = cmp.Or(c.ShardTimeout, d.ShardTimeout)
	c.CheckpointInterval = cmp.Or(c.CheckpointInterval, d.CheckpointInterval)
	c.StartupTimeout = cmp.Or(c.StartupTimeout, d.StartupTimeout)
	c.Concurrency = cmp.Or(c.Concurrency, d.Concurrency)
	c.MaxAttempts = cmp.Or(c.MaxAttempts, d.MaxAttempts)
	c.Logger = cmp.Or(c.Logger, d.Logger)
}

// parts are the configurations of the node's parts, derived from a Config.
type parts struct {
	election    election.Config
	coordinator coordinator.Config
	worker      worker.Config
	bus         bus.Config
}

func (c Config) parts() parts {
	log := cmp.Or(c.Logger, slog.Default()).With("worker", c.ID)
	p := parts{election: election.DefaultConfig(), coordinator: coordinator.DefaultConfig(), worker: worker.DefaultConfig()}
	p.election.Identity, p.election.Container = c.ID, c.LeaseContainer
	p.election.LeaseDuration, p.election.RetryInterval, p.election.RenewInterval = c.LeaseDuration, c.AcquireInterval, min(time.Second, c.LeaseDuration/3) // renewals check storage (election.RenewStall)
	p.election.HeartbeatInterval, p.election.SuspicionTimeout = c.HeartbeatInterval, c.SuspicionTimeout
	p.election.ProbeAfter, p.election.ProbeConfirm, p.election.WatchEvery = c.ProbeAfter, c.ProbeConfirm, c.WatchEvery
	p.election.Logger = log
	p.coordinator.CheckpointInterval, p.coordinator.Logger = c.CheckpointInterval, log
	ret := cmp.Or(c.Retention, &DefaultRetention)
	p.coordinator.RetainSucceeded, p.coordinator.RetainFailed = ret.Succeeded, ret.Failed
	p.worker.ID, p.worker.Concurrency, p.worker.MaxAttempts, p.worker.MapDelay, p.worker.Logger = c.ID, c.Concurrency, c.MaxAttempts, c.MapDelay, log
	p.worker.MemoryBudget, p.coordinator.Partitions = c.MemoryBudget, c.Partitions
	p.bus = bus.Config{Prefix: c.StreamPrefix, ShardTimeout: c.ShardTimeout, Replicas: c.StreamReplicas, MemoryStorage: c.StreamStorage == "memory"}
	// A cut-off follower must know before it would suspect the leader. The window also spans
	// two beat intervals and some, so a follower that hears every other beat (not a named
	// successor) has its proof in time without round trips of its own.
	if c.SuspicionTimeout > 0 {
		p.bus.CutOffAfter = min(1200*time.Millisecond, c.SuspicionTimeout*6/7)
		p.bus.ProbeInterval = min(250*time.Millisecond, p.bus.CutOffAfter/4)
	}
	return p
}

// Validate reports every problem with c (its own and those of the parts it configures: election,
// coordinator, worker, bus) and what to change. Zero fields are checked as their defaults.
func (c Config) Validate() error {
	c.fill()
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	errs = append(errs, checkConnection(c.Storage, c.NATSAuth, c.NATSURL, c.StreamReplicas, c.StreamStorage)...)
	if c.StartupTimeout < 0 {
		add("startup timeout %v: use a positive duration (--startup-timeout)", c.StartupTimeout)
	}
	p := c.parts()
	for _, v := range []interface{ Validate() error }{p.election, p.coordinator, p.worker, p.bus} {
		if err := v.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.OTLPEndpoint != "" {
		if err := telemetry.CheckEndpoint(c.OTLPEndpoint); err != nil {
			add("%v (--otlp-endpoint)", err)
		}
	}
	if err := checkPrograms(c); err != nil { // programs.go
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}
