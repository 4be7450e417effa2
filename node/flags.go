package node

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/store"
)

// flagSet is one command's flags and the environment variables that back them. Every variable the
// binary reads is in flagEnv or recorded by envOnly, so `worker env` (and the compose test) can
// list them.
type flagSet struct {
	*flag.FlagSet
	env       []envFlag // filled by envOnly and bindEnvs
	bound     bool      // bindEnvs ran
	lookupEnv func(string) (string, bool)
	conn      map[string]bool // the connection flags every command shares, shown last in -h
}

// envFlag records which environment variable backs a flag.
type envFlag struct {
	Flag, Env, Usage string
}

func (n *Node) newFlagSet(name string) *flagSet {
	fs := &flagSet{FlagSet: flag.NewFlagSet(name, flag.ContinueOnError), lookupEnv: n.opts.LookupEnv}
	prog := n.opts.Name
	fs.Usage = func() {
		out := fs.Output()
		for _, c := range n.commands() {
			if c.name == name {
				fmt.Fprintf(out, "%s %s: %s\n", prog, name, c.summary)
				if c.example != "" {
					fmt.Fprintf(out, "usage: %s %s\n", prog, c.example)
				}
			}
		}
		var own, conn []*flag.Flag
		fs.VisitAll(func(f *flag.Flag) {
			if fs.conn[f.Name] {
				conn = append(conn, f)
			} else {
				own = append(own, f)
			}
		})
		fmt.Fprintf(out, "\nflags of %s %s:\n", prog, name)
		printFlags(out, own)
		if len(conn) > 0 {
			fmt.Fprintf(out, "\nconnection flags (every command has them):\n")
			printFlags(out, conn)
		}
	}
	return fs
}

// printFlags prints flags as flag.PrintDefaults does.
func printFlags(w io.Writer, flags []*flag.Flag) {
	if len(flags) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, f := range flags {
		name, usage := flag.UnquoteUsage(f)
		line := "  -" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
			if fmt.Sprintf("%T", f.Value) == "*flag.stringValue" {
				usage += fmt.Sprintf(" (default %q)", f.DefValue)
			} else {
				usage += fmt.Sprintf(" (default %v)", f.DefValue)
			}
		}
		fmt.Fprintf(w, "%s\n    \t%s\n", line, strings.ReplaceAll(usage, "\n", "\n    \t"))
	}
}

// flagEnv names the environment variable behind every flag that has one, whichever command
// defines the flag. The variable sets the flag when the command line does not.
var flagEnv = map[string]string{
	"azure-connection-string": "AZURE_STORAGE_CONNECTION_STRING",
	"storage-account-url":     "STORAGE_ACCOUNT_URL",
	"storage-queue-url":       "STORAGE_QUEUE_URL",
	"storage-sas-file":        "STORAGE_SAS_FILE",
	"storage-retry-for":       "STORAGE_RETRY_FOR",
	"nats-creds":              "NATS_CREDS",
	"nats-nkey-file":          "NATS_NKEY_FILE",
	"nats-user":               "NATS_USER",
	"nats-password-file":      "NATS_PASSWORD_FILE",
	"nats-tls-ca":             "NATS_TLS_CA",
	"nats-tls-cert":           "NATS_TLS_CERT",
	"nats-tls-key":            "NATS_TLS_KEY",
	"stream-replicas":         "STREAM_REPLICAS",
	"stream-storage":          "STREAM_STORAGE",
	"nats-url":                "NATS_URL",
	"jobs-container":          "JOBS_CONTAINER",
	"queue":                   "JOBS_QUEUE",
	"lease-container":         "LEASE_CONTAINER",
	"stream-prefix":           "STREAM_PREFIX",
	"log-level":               "LOG_LEVEL",
	"cluster-key-file":        "CLUSTER_KEY_FILE",
	"id":                      "WORKER_ID",
	"lease-duration":          "LEASE_DURATION",
	"acquire-interval":        "ACQUIRE_INTERVAL",
	"concurrency":             "WORKER_CONCURRENCY",
	"max-attempts":            "MAX_ATTEMPTS",
	"shard-timeout":           "SHARD_TIMEOUT",
	"checkpoint-interval":     "CHECKPOINT_INTERVAL",
	"startup-timeout":         "STARTUP_TIMEOUT",
	"map-delay":               "MAP_DELAY",
	"heartbeat-interval":      "HEARTBEAT_INTERVAL",
	"suspicion-timeout":       "SUSPICION_TIMEOUT",
	"retention":               "RETENTION",
	"probe-after":             "PROBE_AFTER",
	"watch-every":             "WATCH_EVERY",
	"probe-confirm":           "PROBE_CONFIRM",
	"http-addr":               "HTTP_ADDR",
	"pprof":                   "PPROF",
	"dashboard-cancel":        "DASHBOARD_CANCEL",
	"api-token-file":          "API_TOKEN_FILE",
	"api-tokens-file":         "API_TOKENS_FILE",
	"http-hosts":              "HTTP_HOSTS",
	"otlp-endpoint":           telemetry.EnvEndpoint,
	"memory-budget":           "MEMORY_BUDGET",
	"partitions":              "PARTITIONS",
	"program":                 "WORKER_PROGRAMS",
	"program-timeout":         "PROGRAM_TIMEOUT",
	"program-env":             "PROGRAM_ENV",
}

// bindEnvs binds every flag of fs that flagEnv names to its variable, and says so in the flag's
// usage. parse and envFlags call it once the flags are defined.
func (fs *flagSet) bindEnvs() {
	if fs.bound {
		return
	}
	fs.bound = true
	fs.VisitAll(func(f *flag.Flag) {
		if env, ok := flagEnv[f.Name]; ok {
			f.Usage = fmt.Sprintf("%s (env %s)", f.Usage, env)
			fs.env = append(fs.env, envFlag{Flag: f.Name, Env: env, Usage: f.Usage})
		}
	})
}

// envFlags lists the environment variables fs reads: its flags' and the env-only ones.
func (fs *flagSet) envFlags() []envFlag {
	fs.bindEnvs()
	return fs.env
}

// envOnly records an environment variable that no flag backs (a secret: a flag's value shows in
// ps and shell history). The code that uses it reads it through fs.lookupEnv.
func envOnly(fs *flagSet, env, usage string) {
	fs.env = append(fs.env, envFlag{Env: env, Usage: usage})
}

// parse parses args, then fills every flag not given on the command line from its environment
// variable. A bad value in the environment is an error that names the variable.
func (fs *flagSet) parse(args []string) error {
	fs.bindEnvs()
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, fe := range fs.env {
		if fe.Flag == "" {
			continue // env only: read where it is used
		}
		if v, ok := fs.lookupEnv(fe.Env); ok && !given[fe.Flag] && v != "" {
			if err := fs.Set(fe.Flag, v); err != nil {
				return fmt.Errorf("environment %s=%q: %v", fe.Env, v, err)
			}
		}
	}
	return nil
}

// common holds the settings every subcommand needs to reach the cluster. Its defaults are
// DefaultConfig's.
type common struct {
	connectFlags   // storage and NATS endpoints, credentials, stream replicas (connect.go)
	natsURL        string
	jobsContainer  string
	queueName      string
	leaseContainer string
	streamPrefix   string
	logLevel       string
}

func (c *common) register(fs *flagSet) {
	defer markConnection(fs)
	d := DefaultConfig()
	c.connectFlags.register(fs)
	fs.StringVar(&c.natsURL, "nats-url", d.NATSURL, "NATS server URL(s), comma-separated")
	fs.StringVar(&c.jobsContainer, "jobs-container", d.JobsContainer, "blob container for job specs, checkpoints and results")
	fs.StringVar(&c.queueName, "queue", d.Queue, "Azure Storage queue that carries submitted job ids")
	fs.StringVar(&c.leaseContainer, "lease-container", d.LeaseContainer, "blob container holding the leader lease blob")
	fs.StringVar(&c.streamPrefix, "stream-prefix", d.StreamPrefix, "prefix of the JetStream streams and NATS subjects")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
}

// markConnection records every flag registered so far as a connection flag.
func markConnection(fs *flagSet) {
	if fs.conn == nil {
		fs.conn = map[string]bool{}
	}
	fs.VisitAll(func(f *flag.Flag) { fs.conn[f.Name] = true })
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

func (c *common) names() protocol.Names { return protocol.NewNames(c.streamPrefix) }

// connectNATS connects to NATS as a client of the cluster (not a member).
func (c *common) connectNATS(name string) (*bus.Bus, error) {
	opts, err := c.natsOptions()
	if err != nil {
		return nil, err
	}
	return bus.Connect(c.natsURL, name, c.busConfig(bus.Config{Prefix: c.streamPrefix}), opts...)
}

// client builds a job client with the node's registry through client.New, from the same
// settings. With withNATS it also connects to NATS, best effort: the connection wakes the leader
// sooner and validates the types the registry lacks (without it, such a type is refused saying
// NATS is unreachable).
func (n *Node) client(ctx context.Context, c *common, withNATS bool) (*client.Client, func(), error) {
	cfg := client.Config{Storage: c.account, NATSURL: c.natsURL, NATSAuth: c.natsAuth, NATSOptional: true,
		JobsContainer: c.jobsContainer, Queue: c.queueName, StreamPrefix: c.streamPrefix, Registry: n.opts.Registry,
		ValidateTimeout: n.opts.Control.Timeout, TypesWindow: n.opts.Control.Window, Name: n.opts.Name + "-cli"}
	if !withNATS {
		cfg.NATSURL = client.NATSOff
	}
	cl, err := client.New(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return cl, cl.Close, nil
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

// envVars lists every environment variable the binary reads, by name.
func (n *Node) envVars() map[string]envFlag {
	out := map[string]envFlag{}
	for _, c := range n.commands() {
		for _, fe := range c.flags().envFlags() {
			out[fe.Env] = fe
		}
	}
	return out
}

func (n *Node) envCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := n.newFlagSet("env")
	fs.SetOutput(stderr)
	if err := fs.parse(args); err != nil {
		return usageErr("%v", err)
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected arguments %s", protocol.Clip(fmt.Sprint(fs.Args()), protocol.ClipLen))
	}
	known := n.envVars()
	names := make([]string, 0, len(known))
	for name := range known {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		flagName := "--" + known[name].Flag
		if known[name].Flag == "" {
			flagName = "(env only)"
		}
		fmt.Fprintf(stdout, "%-34s %-26s %s\n", name, flagName, strings.TrimSuffix(known[name].Usage, " (env "+name+")"))
	}
	return nil
}
