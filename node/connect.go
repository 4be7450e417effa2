package node

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/internal/queue"
	"github.com/mapagg/mapagg/store"
)

// Environment variables that carry secrets and have no flag: a secret on the command line is
// visible to every user of the machine (ps) and lands in shell history.
const (
	envSASToken     = "AZURE_STORAGE_SAS_TOKEN"
	envNATSPassword = "NATS_PASSWORD"
)

// connectFlags are the settings that say how to reach and authenticate to storage and NATS. Every
// subcommand has them (embedded in common).
type connectFlags struct {
	account          store.Account
	sasFile          string
	natsAuth         client.NATSAuth
	natsPasswordFile string
	streamReplicas   int
	streamStorage    string

	clients   *store.Clients // built once by storage()
	lookupEnv func(string) (string, bool)
}

func (c *connectFlags) register(fs *flagSet) {
	c.lookupEnv = fs.lookupEnv
	envOnly(fs, envSASToken, "SAS token for --storage-account-url (secret; or --storage-sas-file)")
	envOnly(fs, envNATSPassword, "password of --nats-user (secret; or --nats-password-file)")
	fs.StringVar(&c.account.ConnectionString, "azure-connection-string", "", "Azure Storage connection string (account key; Azurite). Or --storage-account-url")
	fs.StringVar(&c.account.BlobURL, "storage-account-url", "", "blob endpoint https://<account>.blob.core.windows.net; authenticates with Entra ID (managed/workload identity, Azure CLI) unless a SAS is given")
	fs.StringVar(&c.account.QueueURL, "storage-queue-url", "", "queue endpoint (default: --storage-account-url with .blob. replaced by .queue.)")
	fs.StringVar(&c.sasFile, "storage-sas-file", "", "file holding a SAS token for --storage-account-url (or env "+envSASToken+")")
	fs.DurationVar(&c.account.TransientRetryFor, "storage-retry-for", 0, "how long a storage request answered unavailable or busy (throttling, a full disk) is retried with backoff before it fails; 0: the default 3m, negative: not at all")

	fs.StringVar(&c.natsAuth.CredsFile, "nats-creds", "", "NATS credentials file (user JWT and nkey seed)")
	fs.StringVar(&c.natsAuth.NKeySeedFile, "nats-nkey-file", "", "file holding a NATS nkey user seed")
	fs.StringVar(&c.natsAuth.User, "nats-user", "", "NATS user; the password comes from env "+envNATSPassword+" or --nats-password-file")
	fs.StringVar(&c.natsPasswordFile, "nats-password-file", "", "file holding the password of --nats-user")
	fs.StringVar(&c.natsAuth.TLSCAFile, "nats-tls-ca", "", "PEM CA bundle that verifies the NATS servers")
	fs.StringVar(&c.natsAuth.TLSCertFile, "nats-tls-cert", "", "PEM client certificate for NATS mutual TLS (with --nats-tls-key)")
	fs.StringVar(&c.natsAuth.TLSKeyFile, "nats-tls-key", "", "PEM private key of --nats-tls-cert")

	fs.IntVar(&c.streamReplicas, "stream-replicas", DefaultConfig().StreamReplicas, "JetStream stream replicas: 1, or 3 on a NATS cluster (checked against the server at start)")
	fs.StringVar(&c.streamStorage, "stream-storage", DefaultConfig().StreamStorage, "JetStream stream storage: file or memory (memory loses queued shards when a server restarts)")
}

// resolve reads the secrets from their files or the environment and reports every problem with
// the connection settings. natsURL is checked for an embedded password.
func (c *connectFlags) resolve(natsURL string) error {
	errs := c.readSecrets(true)
	errs = append(errs, checkConnection(c.account, c.natsAuth, natsURL, c.streamReplicas, c.streamStorage)...)
	return errors.Join(errs...)
}

// resolveNATS is resolve for the commands that reach NATS only (types, workers): it reads the NATS
// secrets and checks the NATS settings, and ignores storage.
func (c *connectFlags) resolveNATS(natsURL string) error {
	errs := c.readSecrets(false)
	errs = append(errs, checkNATS(c.natsAuth, natsURL)...)
	return errors.Join(errs...)
}

// readSecrets reads the secrets from their files or the environment (the SAS token only with
// storage), reporting a secret given both ways or a file that cannot be read.
func (c *connectFlags) readSecrets(storage bool) []error {
	var errs []error
	if storage {
		if c.sasFile != "" {
			if c.getenv(envSASToken) != "" {
				errs = append(errs, fmt.Errorf("storage: both --storage-sas-file and %s are set: keep one", envSASToken))
			}
			b, err := os.ReadFile(c.sasFile)
			if err != nil {
				errs = append(errs, fmt.Errorf("storage: --storage-sas-file %s: cannot read it (%v)", c.sasFile, errors.Unwrap(err)))
			} else if c.account.SASToken = strings.TrimSpace(string(b)); c.account.SASToken == "" {
				errs = append(errs, fmt.Errorf("storage: --storage-sas-file %s is empty", c.sasFile))
			}
		} else {
			c.account.SASToken = strings.TrimSpace(c.getenv(envSASToken))
		}
	}
	if c.natsPasswordFile != "" {
		if c.getenv(envNATSPassword) != "" {
			errs = append(errs, fmt.Errorf("nats: both --nats-password-file and %s are set: keep one", envNATSPassword))
		}
		b, err := os.ReadFile(c.natsPasswordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("nats: --nats-password-file %s: cannot read it (%v)", c.natsPasswordFile, errors.Unwrap(err)))
		} else {
			c.natsAuth.Password = strings.TrimRight(string(b), "\r\n")
		}
	} else {
		c.natsAuth.Password = c.getenv(envNATSPassword)
	}
	return errs
}

func (c *connectFlags) getenv(name string) string {
	v, _ := c.lookupEnv(name)
	return v
}

// checkConnection reports every problem with the connection settings (the CLI's flags and
// Config.Validate share it): the storage account, the NATS credentials, a NATS URL that carries
// credentials, the stream replicas and storage.
func checkConnection(account store.Account, auth client.NATSAuth, natsURL string, replicas int, storage string) []error {
	var errs []error
	if err := account.Validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, checkNATS(auth, natsURL)...)
	switch {
	case replicas < 1 || replicas > 5:
		errs = append(errs, fmt.Errorf("--stream-replicas %d: use 1 (one NATS server) or 3 (a NATS cluster; at most 5)", replicas))
	case storage != "file" && storage != "memory":
		errs = append(errs, fmt.Errorf("--stream-storage %q: use file or memory", storage))
	}
	return errs
}

// checkNATS reports every problem with the NATS credentials and a NATS URL that carries them.
func checkNATS(auth client.NATSAuth, natsURL string) []error {
	var errs []error
	if err := auth.Validate(); err != nil {
		errs = append(errs, err)
	}
	for _, u := range strings.Split(natsURL, ",") {
		pu, err := url.Parse(strings.TrimSpace(u))
		if err != nil {
			errs = append(errs, errors.New("nats: --nats-url is not a list of URLs: use nats://host:4222[,nats://host2:4222]"))
			break
		}
		if _, has := pu.User.Password(); has || (pu.User != nil && auth.User == "" && pu.User.Username() != "") {
			errs = append(errs, fmt.Errorf("nats: --nats-url %s carries credentials: give the bare URL, the user in --nats-user and the password in %s or --nats-password-file", pu.Redacted(), envNATSPassword))
			break
		}
	}
	return errs
}

// storage returns the account's clients, built once.
func (c *connectFlags) storage() (*store.Clients, error) {
	if c.clients == nil {
		cl, err := c.account.Open()
		if err != nil {
			return nil, err
		}
		c.clients = cl
	}
	return c.clients, nil
}

// blob is the blob service client (jobs container, lease container, job Env).
func (c *connectFlags) blob() (*azblob.Client, error) {
	cl, err := c.storage()
	if err != nil {
		return nil, err
	}
	return cl.Blob, nil
}

// queue is the job queue name, authenticated like the blob client.
func (c *connectFlags) queue(name string) (*queue.Queue, error) {
	cl, err := c.storage()
	if err != nil {
		return nil, err
	}
	return queue.Open(cl, name)
}

// natsOptions are the NATS credentials and TLS settings for bus.Connect.
func (c *connectFlags) natsOptions() ([]nats.Option, error) { return c.natsAuth.Options() }

// busConfig sets the stream replicas and storage of cfg.
func (c *connectFlags) busConfig(cfg bus.Config) bus.Config {
	cfg.Replicas = c.streamReplicas
	cfg.MemoryStorage = c.streamStorage == "memory"
	return cfg
}

// describe names the storage account and NATS auth for the start log line, without secrets.
func (c *connectFlags) describe() (storage, nats string) {
	return c.account.String(), c.natsAuth.Describe()
}
