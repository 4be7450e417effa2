package election

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
)

// AzureAPI is the BlobAPI over the azblob SDK.
type AzureAPI struct {
	client *azblob.Client
}

var _ BlobAPI = (*AzureAPI)(nil)

// NewAzureAPI wraps an azblob client.
func NewAzureAPI(client *azblob.Client) *AzureAPI { return &AzureAPI{client: client} }

func (a *AzureAPI) blob(container, name string) *blob.Client {
	return a.client.ServiceClient().NewContainerClient(container).NewBlobClient(name)
}

func (a *AzureAPI) lease(container, name, leaseID string) (*lease.BlobClient, error) {
	return lease.NewBlobClient(a.blob(container, name), &lease.BlobClientOptions{LeaseID: to.Ptr(leaseID)})
}

// EnsureBlob implements BlobAPI.
func (a *AzureAPI) EnsureBlob(ctx context.Context, container, name string) error {
	cc := a.client.ServiceClient().NewContainerClient(container)
	if _, err := cc.Create(ctx, nil); err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return translate("create lease container", err)
	}
	// If-None-Match: * makes the upload fail instead of overwriting a blob that exists (and
	// whose metadata carries the epoch). An existing leased blob may answer LeaseIdMissing
	// before the condition is evaluated: it exists, which is all we need.
	_, err := cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{
			IfNoneMatch: to.Ptr(azcore.ETagAny),
		}},
	})
	if err != nil && !bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet,
		bloberror.LeaseIDMissing, bloberror.LeaseAlreadyPresent) {
		return translate("create lease blob", err)
	}
	return nil
}

// AcquireLease implements BlobAPI.
func (a *AzureAPI) AcquireLease(ctx context.Context, container, name, leaseID string, d time.Duration) error {
	lc, err := a.lease(container, name, leaseID)
	if err != nil {
		return fmt.Errorf("acquire lease: %w", err)
	}
	_, err = lc.AcquireLease(ctx, int32(d/time.Second), nil)
	return translate("acquire lease", err)
}

// RenewLease implements BlobAPI.
func (a *AzureAPI) RenewLease(ctx context.Context, container, name, leaseID string) error {
	lc, err := a.lease(container, name, leaseID)
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	_, err = lc.RenewLease(ctx, nil)
	return translate("renew lease", err)
}

// ReleaseLease implements BlobAPI.
func (a *AzureAPI) ReleaseLease(ctx context.Context, container, name, leaseID string) error {
	lc, err := a.lease(container, name, leaseID)
	if err != nil {
		return fmt.Errorf("release lease: %w", err)
	}
	_, err = lc.ReleaseLease(ctx, nil)
	return translate("release lease", err)
}

// GetProperties implements BlobAPI.
func (a *AzureAPI) GetProperties(ctx context.Context, container, name string) (BlobProps, error) {
	resp, err := a.blob(container, name).GetProperties(ctx, nil)
	if err != nil {
		return BlobProps{}, translate("get lease blob properties", err)
	}
	p := BlobProps{Metadata: make(map[string]string, len(resp.Metadata))}
	if resp.LeaseState != nil {
		p.LeaseState = string(*resp.LeaseState)
	}
	if resp.ETag != nil {
		p.ETag = string(*resp.ETag)
	}
	for k, v := range resp.Metadata {
		if v != nil {
			p.Metadata[strings.ToLower(k)] = *v
		}
	}
	return p, nil
}

// BreakLease implements BlobAPI.
func (a *AzureAPI) BreakLease(ctx context.Context, container, name, ifMatch string) error {
	if ifMatch == "" {
		return errors.New("break lease: no ETag to condition the break on")
	}
	lc, err := lease.NewBlobClient(a.blob(container, name), nil)
	if err != nil {
		return fmt.Errorf("break lease: %w", err)
	}
	_, err = lc.BreakLease(ctx, &lease.BlobBreakOptions{
		BreakPeriod:              to.Ptr(int32(0)),
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: to.Ptr(azcore.ETag(ifMatch))},
	})
	err = translate("break lease", err)
	var se *StorageError
	if errors.As(err, &se) && se.StatusCode == http.StatusPreconditionFailed {
		se.Kind = ErrConditionNotMet
	}
	return err
}

// SetMetadata implements BlobAPI.
func (a *AzureAPI) SetMetadata(ctx context.Context, container, name, leaseID string, md map[string]string) error {
	m := make(map[string]*string, len(md))
	for k, v := range md {
		m[k] = to.Ptr(v)
	}
	var opts *blob.SetMetadataOptions
	if leaseID != "" {
		opts = &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: to.Ptr(leaseID)},
		}}
	}
	_, err := a.blob(container, name).SetMetadata(ctx, m, opts)
	return translate("set lease blob metadata", err)
}

// Service error codes that mean "the lease ID given does not hold the lease".
var notHeldCodes = []bloberror.Code{
	bloberror.LeaseIDMismatchWithLeaseOperation,
	bloberror.LeaseIDMismatchWithBlobOperation,
	bloberror.LeaseIDMissing,
	bloberror.LeaseLost,
	bloberror.LeaseNotPresentWithLeaseOperation,
	bloberror.LeaseNotPresentWithBlobOperation,
	bloberror.LeaseIsBrokenAndCannotBeRenewed,
	bloberror.LeaseAlreadyBroken,
	bloberror.LeaseIsBreakingAndCannotBeChanged,
}

// Service error codes that mean "another lease ID holds the lease".
var heldCodes = []bloberror.Code{
	bloberror.LeaseAlreadyPresent,
	bloberror.LeaseIsBreakingAndCannotBeAcquired,
}

// translate turns an SDK error into a *StorageError carrying our sentinel, or wraps a non-HTTP
// error (timeout, connection refused, context) with op. nil stays nil.
func translate(op string, err error) error {
	if err == nil {
		return nil
	}
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		return fmt.Errorf("%s: %w", op, err)
	}
	se := &StorageError{Op: op, StatusCode: re.StatusCode, Code: re.ErrorCode, Err: err}
	if r := re.RawResponse; r != nil && r.Header.Get("x-ms-request-id") == "" {
		server := r.Header.Get("Server") // Azurite's bare 500 of a failure inside it has no request id either
		se.NotStorage = !strings.HasPrefix(server, "Azurite") && !strings.HasPrefix(server, "Windows-Azure")
	}
	switch {
	case bloberror.HasCode(err, heldCodes...):
		se.Kind = ErrLeaseHeld
	case bloberror.HasCode(err, notHeldCodes...), re.StatusCode == http.StatusPreconditionFailed:
		se.Kind = ErrLeaseNotHeld
	case bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.BlobNotFound),
		re.StatusCode == http.StatusNotFound:
		se.Kind = ErrNotFound
	}
	return se
}
