package election

import (
	"context"
	"time"
)

// BlobAPI is the narrow slice of blob storage the elector uses. NewAzureAPI implements it over
// the azblob SDK; tests wrap it to inject hangs and failures. Implementations translate service
// errors into this package's sentinels (ErrLeaseNotHeld, ErrLeaseHeld, ErrNotFound) and leave
// transient errors (timeouts, 5xx, connection errors) untranslated.
type BlobAPI interface {
	// EnsureBlob creates the container and an empty blob when they are missing. It never
	// overwrites an existing blob (its metadata holds the epoch) and succeeds when another
	// process creates them at the same moment.
	EnsureBlob(ctx context.Context, container, blob string) error

	// AcquireLease acquires a lease of duration d (whole seconds, 15s..60s) with the proposed
	// leaseID. Acquiring with the ID of the lease already held succeeds. ErrLeaseHeld when
	// another ID holds it.
	AcquireLease(ctx context.Context, container, blob, leaseID string, d time.Duration) error

	// RenewLease renews the lease. ErrLeaseNotHeld when leaseID no longer holds it.
	RenewLease(ctx context.Context, container, blob, leaseID string) error

	// ReleaseLease releases the lease. ErrLeaseNotHeld when leaseID does not hold it.
	ReleaseLease(ctx context.Context, container, blob, leaseID string) error

	// GetProperties returns the blob's lease state, metadata and ETag. ErrNotFound when the
	// container or blob is missing.
	GetProperties(ctx context.Context, container, blob string) (BlobProps, error)

	// BreakLease breaks the lease at once (break period 0), on condition that the blob's ETag
	// is still ifMatch (If-Match). ErrConditionNotMet when the ETag changed (a new term was
	// stamped since it was read); ErrLeaseNotHeld when no lease is held (nothing to break).
	BreakLease(ctx context.Context, container, blob, ifMatch string) error

	// SetMetadata replaces the blob's metadata, on condition that leaseID holds the lease
	// (ErrLeaseNotHeld otherwise). With an empty leaseID no lease condition is sent.
	SetMetadata(ctx context.Context, container, blob, leaseID string, md map[string]string) error
}

// BlobProps is what GetProperties reports.
type BlobProps struct {
	// LeaseState is Azure's lease state: "available", "leased", "expired", "breaking" or
	// "broken".
	LeaseState string
	// Metadata with lower-cased keys.
	Metadata map[string]string
	// ETag of the blob. Lease operations do not change it; every metadata write (each new
	// term's stamp) does, so it names the term whose stamp was read.
	ETag string
}

// Held reports whether some lease ID holds the lease now.
func (p BlobProps) Held() bool {
	return p.LeaseState == "leased" || p.LeaseState == "breaking"
}
