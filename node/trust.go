package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"

	"github.com/mapagg/mapagg/election"
	"github.com/mapagg/mapagg/internal/bus"
)

// StampKeyID is the lease blob metadata key under which each leader stamps the id of the cluster
// key it signs with.
const StampKeyID = "keyid"

// ErrWrongClusterKey: this worker's cluster key is not the one the cluster signs with.
var ErrWrongClusterKey = errors.New("wrong cluster key")

// keyCheck tells whether this worker holds the cluster's key: the leader stamps the id of the key
// it signs with into the lease blob. The blob is read at start and again (at most every
// recheckEvery) when a message signed with an unheld key arrives. A worker with the wrong key
// does not lead, does not consume and is not ready; it says what to fix.
type keyCheck struct {
	blob      *azblob.Client
	container string
	keys      *bus.Keyring
	log       *slog.Logger
	onWrong   func() // stop consuming

	clusterID atomic.Pointer[string]
	wrong     atomic.Pointer[error]
	mu        sync.Mutex
	lastCheck time.Time
	checking  atomic.Bool
}

const recheckEvery = 5 * time.Second

// ClusterKeyID is the id of the key the cluster signs with ("" unknown), for bus.Config.
func (k *keyCheck) ClusterKeyID() string {
	if p := k.clusterID.Load(); p != nil {
		return *p
	}
	return ""
}

// Err is ErrWrongClusterKey with what to fix, or nil.
func (k *keyCheck) Err() error {
	if p := k.wrong.Load(); p != nil {
		return *p
	}
	return nil
}

// check reads the leader's stamp. It returns the error it found (also kept for Err).
func (k *keyCheck) check(ctx context.Context) error {
	k.mu.Lock()
	k.lastCheck = time.Now()
	k.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The last term's stamp, whether or not its lease is still held: a worker starting during a
	// failover compares with the cluster's key too, instead of racing for the free lease.
	p, err := election.NewAzureAPI(k.blob).GetProperties(ctx, k.container, election.DefaultConfig().Blob)
	if err != nil {
		return nil // storage is away, or no term yet: nothing to compare with
	}
	id := p.Metadata[StampKeyID]
	if id == "" {
		return nil // a leader of an older version
	}
	l := election.LeaderInfo{ID: p.Metadata[election.MetaLeader]}
	l.Epoch, _ = strconv.ParseUint(p.Metadata[election.MetaEpoch], 10, 64)
	k.clusterID.Store(&id)
	if slices.Contains(k.keys.IDs(), id) {
		return nil
	}
	werr := fmt.Errorf("%w: the cluster's leader (%s, epoch %d) signs with cluster key %s, and this worker holds %v; give this worker the cluster's key (the same CLUSTER_KEY or --cluster-key-file as the others, or neither to read the blob %s in the lease container) and restart it; until then it neither leads nor processes shards",
		ErrWrongClusterKey, l.ID, l.Epoch, id, k.keys, ClusterKeyBlob)
	if k.wrong.CompareAndSwap(nil, &werr) {
		k.log.Error("wrong cluster key", "err", werr)
		if k.onWrong != nil {
			k.onWrong()
		}
	}
	return werr
}

// evidence takes a refused message: one signed with a key this worker lacks makes it read the
// leader's stamp again (in the background, at most every recheckEvery).
func (k *keyCheck) evidence(err error) {
	var unknown *bus.UnknownKeyError
	if !errors.As(err, &unknown) || k.Err() != nil {
		return
	}
	k.mu.Lock()
	due := time.Since(k.lastCheck) >= recheckEvery
	k.mu.Unlock()
	if !due || !k.checking.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer k.checking.Store(false)
		_ = k.check(context.Background())
	}()
}

// newInstance is a random id of this process, to tell two processes with one worker id apart.
func newInstance() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
