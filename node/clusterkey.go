package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/mapagg/mapagg/internal/bus"
	"github.com/mapagg/mapagg/store"
)

// The cluster key authenticates every shard and result (bus.Keyring): a message no member
// produced is never merged or run. By default the storage account holds it: every member already
// trusts it and a NATS-only client cannot reach it. The first member to start creates a random
// key in the blob ClusterKeyBlob of the lease container (If-None-Match, so members racing to
// create it all end with the winner's). Every member reads it at start. A deployment that separates
// the two gives the key itself (--cluster-key-file or CLUSTER_KEY) to every member.

// ClusterKeyBlob is the blob, in the lease container, that holds the cluster key by default.
const ClusterKeyBlob = "cluster-key"

// envClusterKey carries the cluster key itself (secret: no flag, see envOnly).
const envClusterKey = "CLUSTER_KEY"

// keyFlags are `run`'s cluster key settings.
type keyFlags struct {
	file      string
	lookupEnv func(string) (string, bool)
}

func (k *keyFlags) register(fs *flagSet) {
	k.lookupEnv = fs.lookupEnv
	fs.StringVar(&k.file, "cluster-key-file", "", "file holding the cluster key that authenticates shards and results (one base64 key of 32 bytes per line: the first signs, all are accepted); default: the blob "+ClusterKeyBlob+" in --lease-container, created at first start")
	envOnly(fs, envClusterKey, "the cluster key itself (secret; or --cluster-key-file; default: the blob "+ClusterKeyBlob+" in --lease-container)")
}

// ClusterKeys is the keyring members sign and verify shards and results with: the current key
// and any previous ones still accepted during a rotation.
type ClusterKeys = bus.Keyring

// ParseClusterKeys reads a keyring in the format of --cluster-key-file and CLUSTER_KEY (`worker
// cluster-key` prints one). Its errors never contain the key.
func ParseClusterKeys(text string) (*ClusterKeys, error) { return bus.ParseKeys(text) }

// resolve returns the explicit keyring, or nil when none was given (the blob holds it). Errors
// name the source, never the key.
func (k *keyFlags) resolve() (*bus.Keyring, error) {
	env, _ := k.lookupEnv(envClusterKey)
	switch {
	case k.file != "" && env != "":
		return nil, fmt.Errorf("cluster key: both --cluster-key-file and %s are set: keep one", envClusterKey)
	case k.file != "":
		b, err := os.ReadFile(k.file)
		if err != nil {
			return nil, fmt.Errorf("cluster key: --cluster-key-file %s: cannot read it (%v)", k.file, errors.Unwrap(err))
		}
		r, err := bus.ParseKeys(string(b))
		if err != nil {
			return nil, fmt.Errorf("cluster key: --cluster-key-file %s: %w", k.file, err)
		}
		return r, nil
	case env != "":
		r, err := bus.ParseKeys(env)
		if err != nil {
			return nil, fmt.Errorf("cluster key: %s: %w", envClusterKey, err)
		}
		return r, nil
	}
	return nil, nil
}

// keyBlob is the part of a blob container loadClusterKey uses.
type keyBlob interface {
	Ensure(ctx context.Context) error
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
}

var _ keyBlob = (*store.Container)(nil)

// ErrClusterKey matches a cluster key blob that cannot be read or used.
var ErrClusterKey = errors.New("cluster key")

// loadClusterKey reads the cluster key from its blob, creating a random one when there is none.
// Members racing to create it all end with the same key: only one If-None-Match write succeeds,
// and the others read what it wrote.
func loadClusterKey(ctx context.Context, c keyBlob) (*bus.Keyring, error) {
	if err := c.Ensure(ctx); err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 3; attempt++ {
		data, _, err := c.Get(ctx, ClusterKeyBlob)
		if err == nil {
			r, err := bus.ParseKeys(string(data))
			if err != nil {
				return nil, fmt.Errorf("%w: blob %s: %w (replace it with a valid key, or delete it before any member starts to have one created)", ErrClusterKey, ClusterKeyBlob, err)
			}
			return r, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("read the cluster key: %w", err)
		}
		k, err := bus.GenerateKey()
		if err != nil {
			return nil, err
		}
		text := "# mapagg cluster key: authenticates shards and results. Secret. First line signs; every line is accepted.\n" + k.Encode() + "\n"
		if _, err := c.Put(ctx, ClusterKeyBlob, []byte(text), store.Cond{IfNoneMatch: true}); err == nil {
			return bus.NewKeyring(k)
		} else if !errors.Is(err, store.ErrExists) {
			return nil, fmt.Errorf("create the cluster key: %w", err)
		}
		// Another member created it first: read theirs.
	}
	return nil, fmt.Errorf("%w: blob %s neither readable nor creatable", ErrClusterKey, ClusterKeyBlob)
}

// clusterKeys returns cfg's explicit keys, or reads (or creates) them in the lease container,
// retrying while storage comes up (within the startup timeout).
func clusterKeys(ctx context.Context, log *slog.Logger, cfg Config, c keyBlob) (*bus.Keyring, error) {
	if cfg.ClusterKeys != nil {
		log.Info("cluster key", "source", "explicit", "keys", cfg.ClusterKeys)
		return cfg.ClusterKeys, nil
	}
	deadline := time.Now().Add(cfg.StartupTimeout)
	for attempt := 0; ; attempt++ {
		octx, cancel := context.WithTimeout(ctx, 15*time.Second)
		r, err := loadClusterKey(octx, c)
		cancel()
		if err == nil {
			log.Info("cluster key", "source", "blob "+cfg.LeaseContainer+"/"+ClusterKeyBlob, "keys", r)
			return r, nil
		}
		if errors.Is(err, ErrClusterKey) || errors.Is(err, bus.ErrBadKey) || refusedCredentials(err) {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("cluster key not readable within %v: %w", cfg.StartupTimeout, err)
		}
		if attempt == 0 || attempt%10 == 0 {
			log.Warn("waiting for storage to read the cluster key", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// refusedLogger logs deliveries the bus refused as unauthenticated: at most one line a second,
// with how many were refused since the last line. A flood of forgeries cannot flood the log, and
// a member with the wrong key is never silent (the error names both key ids).
func refusedLogger(log *slog.Logger) func(source, subject string, err error) {
	var mu sync.Mutex
	var last time.Time
	var skipped int
	return func(source, subject string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) < time.Second {
			skipped++
			return
		}
		last = time.Now()
		log.Warn("refused an unauthenticated message (dead-lettered)", "source", source, "subject", cut(subject, 200),
			"err", err, "also_refused_since_last_line", skipped)
		skipped = 0
	}
}

// cut shortens s to n bytes, saying how long it was.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:n], len(s))
}
