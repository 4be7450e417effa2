package election

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
)

// Metadata keys of the lease blob, written by each new leader under its lease.
const (
	MetaEpoch  = "epoch"  // decimal uint64, +1 per acquisition
	MetaLeader = "leader" // Config.Identity of the leader
	MetaSince  = "since"  // RFC 3339 (nanoseconds, UTC) time the term began
	// MetaReleased marks a term that released its lease gracefully; the next stamp removes it.
	MetaReleased = "released"
)

// Term describes one tenure of leadership. The leader context carries it (TermFromContext).
type Term struct {
	// Epoch is the fencing token: it grows by one with every acquisition of the lease and is
	// stored in the lease blob's metadata under the lease. Stamp it on everything the leader
	// writes and make those writes conditional; refuse anything from a lower epoch.
	Epoch    uint64
	Identity string    // Config.Identity of the leader
	Since    time.Time // wall-clock start of the term
	LeaseID  string    // the Azure lease ID of this term
}

type termKey struct{}

// TermFromContext returns the Term carried by a leader context.
func TermFromContext(ctx context.Context) (Term, bool) {
	t, ok := ctx.Value(termKey{}).(Term)
	return t, ok
}

// LeaderInfo is what an observer can learn about the current leader from the lease blob.
type LeaderInfo struct {
	ID    string // the leader's Identity
	Epoch uint64
	Since time.Time
	// Stamp is the rest of the term's metadata (the leader's Config.Stamp).
	Stamp map[string]string
}

// Leader reads the lease blob and returns the current leader, or nil, nil when nobody holds the
// lease. See ReadLeader for what it can and cannot tell.
func (e *Elector) Leader(ctx context.Context) (*LeaderInfo, error) {
	return readLeader(ctx, e.api, e.cfg.Container, e.cfg.Blob)
}

// ReadLeader returns the current leader of the election on container/blob, or nil, nil when no
// lease is held or the container or blob does not exist. It needs no Elector (for `worker
// status`). It reports the metadata of the lease blob while a lease is held: during the few
// milliseconds between a new acquisition and its metadata write it still names the previous
// leader.
func ReadLeader(ctx context.Context, client *azblob.Client, container, blob string) (*LeaderInfo, error) {
	if client == nil {
		return nil, errors.New("election: ReadLeader needs an azblob client")
	}
	return readLeader(ctx, NewAzureAPI(client), container, blob)
}

func readLeader(ctx context.Context, api BlobAPI, container, blob string) (*LeaderInfo, error) {
	p, err := api.GetProperties(ctx, container, blob)
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read leader: %w", err)
	}
	if !p.Held() {
		return nil, nil
	}
	info := &LeaderInfo{ID: p.Metadata[MetaLeader]}
	if s := p.Metadata[MetaEpoch]; s != "" {
		info.Epoch, _ = strconv.ParseUint(s, 10, 64)
	}
	if s := p.Metadata[MetaSince]; s != "" {
		info.Since, _ = time.Parse(time.RFC3339Nano, s)
	}
	for k, v := range p.Metadata {
		if k != MetaEpoch && k != MetaLeader && k != MetaSince && k != MetaReleased {
			if info.Stamp == nil {
				info.Stamp = map[string]string{}
			}
			info.Stamp[k] = v
		}
	}
	return info, nil
}

// parseEpoch reads the epoch from the lease blob's metadata; a missing epoch is 0.
func parseEpoch(md map[string]string) (uint64, error) {
	s, ok := md[MetaEpoch]
	if !ok || s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lease blob metadata %s=%q is not a number: fix it to the last epoch used (never lower it), or nobody can lead", MetaEpoch, s)
	}
	return n, nil
}

func termMetadata(t Term) map[string]string {
	return map[string]string{
		MetaEpoch:  strconv.FormatUint(t.Epoch, 10),
		MetaLeader: t.Identity,
		MetaSince:  t.Since.UTC().Format(time.RFC3339Nano),
	}
}

// newLeaseID returns a random (version 4) UUID, the form Azure requires of a lease ID.
func newLeaseID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
