package client

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/clusterask"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

var _ Validator = (*clusterask.Validator)(nil)

// ErrNoWorkers is returned when the running cluster's answer is needed (a type this program
// lacks, the cluster's types) and no worker answers on NATS.
var ErrNoWorkers = clusterask.ErrNoWorkers

// NATSOff as Config.NATSURL builds a client without NATS.
const NATSOff = "off"

// Config is how New reaches a cluster: the settings `worker submit` reads, flag by flag.
type Config struct {
	// Storage says how to reach Azure Storage: a connection string, or an account URL with
	// Entra ID or a SAS token. Required. --azure-connection-string, --storage-account-url.
	Storage store.Account
	// NATSURL is the NATS server URL(s), comma-separated. Default nats://127.0.0.1:4222.
	// NATSOff: no NATS (types not in Registry are refused; the leader sees new jobs at its next
	// queue poll). --nats-url.
	NATSURL string
	// NATSAuth holds the NATS credentials and TLS settings. Default none. --nats-creds, ...
	NATSAuth NATSAuth
	// NATSOptional keeps New going when NATS cannot be reached: the client then validates
	// Registry's types only and says why it cannot ask the cluster about others. Default false.
	NATSOptional bool
	// JobsContainer holds job specs, checkpoints and results. Default "jobs". --jobs-container.
	JobsContainer string
	// Queue carries submitted job ids. Default "jobs". --queue.
	Queue string
	// StreamPrefix prefixes the NATS subjects. Default "mapagg". --stream-prefix.
	StreamPrefix string
	// Registry holds the job types this program validates locally. Default none: the running
	// cluster validates every type.
	Registry *jobs.Registry
	// ValidateTimeout bounds one validation by the cluster. Default 10s.
	ValidateTimeout time.Duration
	// TypesWindow is how long a types request collects answers. Default 500ms.
	TypesWindow time.Duration
	// Name names the NATS connection. Default "mapagg-client".
	Name string
}

// DefaultConfig returns the defaults of every field but Storage.
func DefaultConfig() Config {
	return Config{NATSURL: "nats://127.0.0.1:4222", JobsContainer: "jobs", Queue: "jobs", StreamPrefix: "mapagg",
		ValidateTimeout: 10 * time.Second, TypesWindow: 500 * time.Millisecond, Name: "mapagg-client"}
}

// withDefaults sets every zero field to its default: the one place defaults are applied.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.NATSURL = cmp.Or(c.NATSURL, d.NATSURL)
	c.JobsContainer = cmp.Or(c.JobsContainer, d.JobsContainer)
	c.Queue = cmp.Or(c.Queue, d.Queue)
	c.StreamPrefix = cmp.Or(c.StreamPrefix, d.StreamPrefix)
	c.ValidateTimeout = cmp.Or(c.ValidateTimeout, d.ValidateTimeout)
	c.TypesWindow = cmp.Or(c.TypesWindow, d.TypesWindow)
	c.Name = cmp.Or(c.Name, d.Name)
	return c
}

// ErrInvalidConfig is matched by every error Config.Validate returns.
var ErrInvalidConfig = errors.New("client: invalid config")

// Validate reports every problem with c and what to change. Zero fields are checked as their
// defaults.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if err := c.Storage.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.NATSURL != NATSOff {
		if err := c.NATSAuth.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ValidateTimeout < 0 || c.TypesWindow < 0 || c.TypesWindow > time.Minute {
		errs = append(errs, fmt.Errorf("ValidateTimeout %v, TypesWindow %v: use positive durations, the window at most 1m", c.ValidateTimeout, c.TypesWindow))
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
	}
	return nil
}

// New returns a client of the cluster cfg describes. It opens storage (it does not create the
// container or queue) and connects to NATS, which wakes the leader on submit and validates the
// types Registry lacks. Close releases the connection.
func New(ctx context.Context, cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	clients, err := cfg.Storage.Open()
	if err != nil {
		return nil, err
	}
	q, err := queue.Open(clients, cfg.Queue)
	if err != nil {
		return nil, err
	}
	c := &Client{Store: store.New(clients.Blob, cfg.JobsContainer), Queue: q, Registry: cfg.Registry,
		Containers: store.NewEnv(clients.Blob)}
	if cfg.NATSURL == NATSOff {
		return c, nil
	}
	v := &clusterask.Validator{URL: cfg.NATSURL, Prefix: cfg.StreamPrefix, Timeout: cfg.ValidateTimeout, Window: cfg.TypesWindow}
	if cfg.Registry != nil {
		v.Local = cfg.Registry.Types()
	}
	opts, err := cfg.NATSAuth.Options()
	if err != nil {
		return nil, err
	}
	b, err := bus.Connect(cfg.NATSURL, cfg.Name, bus.Config{Prefix: cfg.StreamPrefix}, opts...)
	if err == nil && ctx.Err() != nil {
		b.Close()
		return nil, ctx.Err()
	}
	switch {
	case err == nil:
		c.Notify, v.Conn, c.close = b, b.Conn(), b.Close
		c.ends = &endWatch{nc: b.Conn(), subject: protocol.NewNames(cfg.StreamPrefix).Events()}
	case cfg.NATSOptional:
		v.ConnErr = err
	default:
		return nil, fmt.Errorf("connect to NATS at %s: %w (check --nats-url, or set NATSOptional)", cfg.NATSURL, err)
	}
	c.Validator = v
	return c, nil
}

// Close releases what New opened (the NATS connection). A Client built by hand has nothing to
// release.
func (c *Client) Close() {
	if c.close != nil {
		c.close()
	}
}
