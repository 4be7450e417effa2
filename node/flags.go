package node

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/mapagg/mapagg/bus"
	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/store"
)

// envFlag records which environment variable backs a flag. Every variable the binary reads is
// registered through bindEnv, so `worker env` (and the compose test) can list them.
type envFlag struct {
	Flag, Env, Usage string
}

var knownEnv = map[string]envFlag{}

// bindEnv names the environment variable that sets flag name when it is not given on the
// command line.
func bindEnv(fs *flag.FlagSet, name, env string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("bindEnv: no flag " + name)
	}
	f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, env)
	knownEnv[env] = envFlag{Flag: name, Env: env, Usage: f.Usage}
	envOf[fs] = append(envOf[fs], [2]string{name, env})
}

var envOf = map[*flag.FlagSet][][2]string{}

// parse parses args, then fills every flag not given on the command line from its environment
// variable. A bad value in the environment is an error that names the variable.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, fe := range envOf[fs] {
		if v, ok := os.LookupEnv(fe[1]); ok && !given[fe[0]] && v != "" {
			if err := fs.Set(fe[0], v); err != nil {
				return fmt.Errorf("environment %s=%q: %v", fe[1], v, err)
			}
		}
	}
	return nil
}

// common holds the settings every subcommand needs to reach the cluster.
type common struct {
	connectFlags   // storage and NATS endpoints, credentials, stream replicas (connect.go)
	natsURL        string
	jobsContainer  string
	queueName      string
	leaseContainer string
	streamPrefix   string
	logLevel       string
	timeout        time.Duration
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s), comma-separated")
	bindEnv(fs, "nats-url", "NATS_URL")
	fs.StringVar(&c.jobsContainer, "jobs-container", "jobs", "blob container for job specs, checkpoints and results")
	bindEnv(fs, "jobs-container", "JOBS_CONTAINER")
	fs.StringVar(&c.queueName, "queue", "jobs", "Azure Storage queue that carries submitted job ids")
	bindEnv(fs, "queue", "JOBS_QUEUE")
	fs.StringVar(&c.leaseContainer, "lease-container", "leader", "blob container holding the leader lease blob")
	bindEnv(fs, "lease-container", "LEASE_CONTAINER")
	fs.StringVar(&c.streamPrefix, "stream-prefix", "mapagg", "prefix of the JetStream streams and NATS subjects")
	bindEnv(fs, "stream-prefix", "STREAM_PREFIX")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	bindEnv(fs, "log-level", "LOG_LEVEL")
	c.connectFlags.register(fs)
}

func (c *common) check() error {
	return c.connectFlags.resolve(c.natsURL)
}

func (c *common) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("log level %q: use debug, info, warn or error", c.logLevel)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl})), nil
}

// client builds a job client; the NATS hint connection is optional and skipped when unreachable.
func (c *common) client(ctx context.Context, withNATS bool) (*client.Client, func(), error) {
	bc, err := c.blob()
	if err != nil {
		return nil, nil, err
	}
	q, err := c.queue(c.queueName)
	if err != nil {
		return nil, nil, err
	}
	cl := &client.Client{Store: store.New(bc, c.jobsContainer), Queue: q}
	closer := func() {}
	if withNATS {
		opts, err := c.natsOptions()
		if err != nil {
			return nil, nil, err
		}
		if b, err := bus.Connect(c.natsURL, "worker-cli", c.busConfig(bus.Config{Prefix: c.streamPrefix}), opts...); err == nil {
			cl.Notify = b
			closer = b.Close
		}
	}
	return cl, closer, nil
}

// ensure creates the container and the queue when missing (first submit on a fresh account).
func (c *common) ensure(ctx context.Context) error {
	bc, err := c.blob()
	if err != nil {
		return err
	}
	if err := store.New(bc, c.jobsContainer).Ensure(ctx); err != nil {
		return err
	}
	q, err := c.queue(c.queueName)
	if err != nil {
		return err
	}
	return q.Ensure(ctx)
}

// printEnv lists every environment variable the binary reads.
func printEnv(w io.Writer) {
	names := make([]string, 0, len(knownEnv))
	for n := range knownEnv {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "%-34s --%-24s %s\n", n, knownEnv[n].Flag, strings.TrimSuffix(knownEnv[n].Usage, " (env "+n+")"))
	}
}
