// Package store is the blob-storage adapter: one container of Azure Blob Storage (Azurite in tests
// and local runs) seen as a small key/value store with conditional writes, which is all the
// coordinator, the worker and the CLI need. SDK errors are translated here into the sentinels
// below, so no other package looks at bloberror codes. Account (account.go) says how to reach the
// storage account — a connection string, endpoint URLs with a SAS, or endpoint URLs with Microsoft
// Entra ID (azidentity) — and builds the blob client and the queue clients the same way from it;
// its secrets never appear in its errors, String or LogValue.
//
// Guarantees: Put with IfMatch writes only if the blob's ETag is unchanged, and with IfNoneMatch
// only if the blob does not exist; both are enforced by the storage service, so they fence writers
// that do not coordinate with each other. Nothing here retries a conditional failure. A request
// the account answers "unavailable" or "busy" is retried with backoff for a bounded time
// (transient.go); a write that finds its container missing creates it and writes again.
package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/jobs"
)

// Sentinels. Callers match them with errors.Is.
var (
	// ErrNotFound: the blob (or its container) does not exist.
	ErrNotFound = errors.New("blob not found")
	// ErrExists: a Put with IfNoneMatch found the blob already there.
	ErrExists = errors.New("blob already exists")
	// ErrConflict: a Put with IfMatch found a different ETag (someone else wrote the blob).
	ErrConflict = errors.New("blob changed since it was read")
)

// ETag identifies one version of a blob.
type ETag string

// Cond makes a Put conditional. The zero Cond writes unconditionally.
type Cond struct {
	IfMatch     ETag // write only if the blob's current ETag is this
	IfNoneMatch bool // write only if the blob does not exist
}

// ClientOptions are the SDK options this project uses: a bounded time per try and a few retries,
// so a hung call cannot stall a caller past its own deadline (callers also pass contexts),
// transient failures retried for DefaultTransientRetryFor (transient.go), and the control plane's
// Transport. DataClientOptions is the same over the data plane's.
func ClientOptions() *azblob.ClientOptions {
	return clientOptions(Transport(), DefaultTransientRetryFor)
}

// DataClientOptions are ClientOptions over DataTransport: the client of a process's bulk reads
// and writes (a Map's input, a keyed job's runs and outputs).
func DataClientOptions() *azblob.ClientOptions {
	return clientOptions(DataTransport(), DefaultTransientRetryFor)
}

func clientOptions(t policy.Transporter, retryFor time.Duration) *azblob.ClientOptions {
	return &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry:           policy.RetryOptions{MaxRetries: 3, TryTimeout: 15 * time.Second, RetryDelay: 100 * time.Millisecond, MaxRetryDelay: 2 * time.Second},
		Transport:       t,
		PerCallPolicies: []policy.Policy{transientPolicy{retryFor: retryFor}},
	}}
}

// Transport is the HTTP client of the control plane's storage clients (the lease, checkpoints,
// specs, status records and the queue). It is the SDK's default but keeps up to 128 idle
// connections a host instead of 10: a leader makes dozens of storage requests at once (intake,
// checkpoints, clean-ups), and beyond the idle pool each request's connection was closed after
// it, so every request paid a new TCP connection (a burst of 300 tiny jobs closed about 600). On
// the emulator that cost its single-threaded process CPU; on Azure it costs a round trip or a
// TLS handshake a request.
//
// Bulk data has a pool of its own (DataTransport), so a lease renewal or a checkpoint never
// waits for a connection behind shuffle traffic: 9 leader changes in 11 keyed jobs came from
// renewals queued on one saturated pool (design, "The control plane goes first").
//
// At most ControlInFlight of its requests are out at once, but for the lease's own (a request
// that names a lease: acquire, renew, break, release and the term's stamp), which never wait. A
// leader firing hundreds of schedule ticks a second had about 900 requests queued in the
// emulator, each answered after 3 s, its lease renewals among them; held in the process
// instead, they wait there and the renewal goes straight through.
var Transport = sync.OnceValue(func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 128
	return &http.Client{Transport: newControlLimit(ControlInFlight, t)}
})

// ControlInFlight bounds the control plane's storage requests out at once in a process to one
// storage endpoint (Transport), lease requests aside.
const ControlInFlight = 48

// controlLimit holds a request until fewer than n to its host are out, unless it names a lease.
// Hosts are apart: requests hung on one endpoint (a cut link) never hold another's.
type controlLimit struct {
	n     int
	next  http.RoundTripper
	mu    sync.Mutex
	hosts map[string]chan struct{}
}

func newControlLimit(n int, next http.RoundTripper) *controlLimit {
	return &controlLimit{n: max(n, 1), next: next, hosts: map[string]chan struct{}{}}
}

func (c *controlLimit) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("x-ms-lease-action") != "" || req.Header.Get("x-ms-lease-id") != "" {
		return c.next.RoundTrip(req)
	}
	c.mu.Lock()
	slots := c.hosts[req.URL.Host]
	if slots == nil {
		slots = make(chan struct{}, c.n)
		c.hosts[req.URL.Host] = slots
	}
	c.mu.Unlock()
	select {
	case slots <- struct{}{}:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	defer func() { <-slots }()
	return c.next.RoundTrip(req)
}

// DataTransport is the HTTP client of the data plane's storage clients: a pool of its own. It
// does not cap connections a host: a reduce holds one open body per map run while it merges, and
// a cap below that would park the merge on itself until the time per try ran out.
var DataTransport = sync.OnceValue(func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = 256, 128
	return &http.Client{Transport: t}
})

// NewClient builds a blob service client from a connection string.
func NewClient(connectionString string) (*azblob.Client, error) {
	c, err := azblob.NewClientFromConnectionString(connectionString, ClientOptions())
	if err != nil {
		return nil, fmt.Errorf("blob client: %w (check the storage connection string)", err)
	}
	return c, nil
}

// Container is one blob container.
type Container struct {
	name      string
	cc        *container.Client
	onRebuilt func(container, op string)
	log       *slog.Logger // nil: slog.Default()
}

// OnRebuilt sets a function called (after a log line) whenever a write found the container
// missing and created it again, with the operation that found it: for events and metrics. It
// returns c.
func (c *Container) OnRebuilt(fn func(container, op string)) *Container { c.onRebuilt = fn; return c }

// WithLogger sets the logger of c's own log lines (a container found missing); default
// slog.Default(). It returns c.
func (c *Container) WithLogger(l *slog.Logger) *Container { c.log = l; return c }

func (c *Container) logger() *slog.Logger {
	if c.log != nil {
		return c.log
	}
	return slog.Default()
}

// lost reports whether err says the container is missing and, if so, creates it again (a storage
// account wiped or the container deleted under the cluster: the member that writes next rebuilds
// it). A write that reports true is to be tried once more.
func (c *Container) lost(ctx context.Context, err error, op string) bool {
	if err == nil || !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return false
	}
	if eerr := c.Ensure(ctx); eerr != nil {
		c.logger().Warn("the container is missing and cannot be created again", "container", c.name, "found_by", op, "err", eerr)
		return false
	}
	c.logger().Warn("the container was missing; created it again", "container", c.name, "found_by", op)
	if c.onRebuilt != nil {
		c.onRebuilt(c.name, op)
	}
	return true
}

// New returns the container name of client's account.
func New(client *azblob.Client, name string) *Container {
	return &Container{name: name, cc: client.ServiceClient().NewContainerClient(name)}
}

// Name is the container's name.
func (c *Container) Name() string { return c.name }

// Ensure creates the container when it is missing. Concurrent callers all succeed. A caller not
// allowed to create containers succeeds when the container exists and it can read it.
func (c *Container) Ensure(ctx context.Context) error {
	_, err := c.cc.Create(ctx, nil)
	if err != nil && bloberror.HasCode(err, bloberror.AuthorizationPermissionMismatch, bloberror.AuthorizationFailure) {
		// A role scoped to the container (least privilege) may not create containers: an existing
		// container we can read is enough.
		if _, perr := c.cc.GetProperties(ctx, nil); perr == nil {
			return nil
		}
		return fmt.Errorf("create container %s: %w (not allowed to create it and cannot read it: create the container, or grant Storage Blob Data Contributor on it)", c.name, err)
	}
	if err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
		return fmt.Errorf("create container %s: %w", c.name, err)
	}
	return nil
}

// Get reads a whole blob and its ETag.
func (c *Container) Get(ctx context.Context, name string) ([]byte, ETag, error) {
	resp, err := c.cc.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return nil, "", translate("get "+name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, "", fmt.Errorf("get %s: %w", name, err)
	}
	var etag ETag
	if resp.ETag != nil {
		etag = ETag(*resp.ETag)
	}
	return data, etag, nil
}

// Exists reports whether a blob exists.
func (c *Container) Exists(ctx context.Context, name string) (bool, error) {
	_, err := c.cc.NewBlobClient(name).GetProperties(ctx, nil)
	if err == nil {
		return true, nil
	}
	if err = translate("stat "+name, err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return false, err
}

// Put writes a whole blob, optionally conditionally, and returns its new ETag.
func (c *Container) Put(ctx context.Context, name string, data []byte, cond Cond) (ETag, error) {
	return c.PutMeta(ctx, name, data, nil, cond)
}

// PutMeta is Put that also sets the blob's metadata (replacing any), in the same write.
func (c *Container) PutMeta(ctx context.Context, name string, data []byte, meta map[string]string, cond Cond) (ETag, error) {
	opts := &blockblob.UploadOptions{}
	if len(meta) > 0 {
		opts.Metadata = make(map[string]*string, len(meta))
		for k, v := range meta {
			opts.Metadata[k] = to.Ptr(v)
		}
	}
	if cond.IfMatch != "" || cond.IfNoneMatch {
		mac := &blob.ModifiedAccessConditions{}
		if cond.IfMatch != "" {
			mac.IfMatch = to.Ptr(azcore.ETag(cond.IfMatch))
		}
		if cond.IfNoneMatch {
			mac.IfNoneMatch = to.Ptr(azcore.ETagAny)
		}
		opts.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: mac}
	}
	resp, err := c.cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), opts)
	if c.lost(ctx, err, "put "+name) {
		resp, err = c.cc.NewBlockBlobClient(name).Upload(ctx, streaming.NopCloser(bytes.NewReader(data)), opts)
	}
	if err != nil {
		err = translate("put "+name, err)
		if cond.IfNoneMatch && errors.Is(err, ErrConflict) {
			err = fmt.Errorf("put %s: %w", name, ErrExists)
		}
		return "", err
	}
	if resp.ETag == nil {
		return "", nil
	}
	return ETag(*resp.ETag), nil
}

// Props is what a HEAD of a blob returns.
type Props struct {
	Size     int64
	ETag     ETag
	Meta     map[string]string // keys lower-cased
	Modified time.Time         // Last-Modified: when the blob was last written
}

// Props reads a blob's size, ETag and metadata, not its content.
func (c *Container) Props(ctx context.Context, name string) (Props, error) {
	resp, err := c.cc.NewBlobClient(name).GetProperties(ctx, nil)
	if err != nil {
		return Props{}, translate("stat "+name, err)
	}
	var size int64
	if resp.ContentLength != nil {
		size = *resp.ContentLength
	}
	return propsOf(size, resp.ETag, resp.LastModified, resp.Metadata), nil
}

// propsOf is the Props of a blob of size bytes from a response's headers.
func propsOf(size int64, etag *azcore.ETag, modified *time.Time, meta map[string]*string) Props {
	p := Props{Size: size, Meta: make(map[string]string, len(meta))}
	if etag != nil {
		p.ETag = ETag(*etag)
	}
	if modified != nil {
		p.Modified = *modified
	}
	for k, v := range meta {
		if v != nil {
			p.Meta[strings.ToLower(k)] = *v
		}
	}
	return p
}

// GetHead reads the first limit bytes of a blob (all of it when smaller) and its properties in
// one request, where Props then Get would make two. Props.Size is the whole blob's: the content
// is complete when len(data) == Size.
func (c *Container) GetHead(ctx context.Context, name string, limit int64) ([]byte, Props, error) {
	if limit <= 0 {
		return nil, Props{}, fmt.Errorf("get %s: read limit %d: want at least 1 byte", name, limit)
	}
	bc := c.cc.NewBlobClient(name)
	resp, err := bc.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Count: limit}})
	if bloberror.HasCode(err, bloberror.InvalidRange) {
		// An empty blob has no first byte to range over: read it whole (nothing).
		resp, err = bc.DownloadStream(ctx, nil)
	}
	if err != nil {
		return nil, Props{}, translate("get "+name, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, Props{}, fmt.Errorf("get %s: %w", name, err)
	}
	size := int64(len(data))
	if resp.ContentRange != nil {
		n, ok := rangeTotal(*resp.ContentRange)
		if !ok || n < size {
			return nil, Props{}, fmt.Errorf("get %s: unreadable Content-Range %q", name, clip80(*resp.ContentRange))
		}
		size = n
	}
	return data, propsOf(size, resp.ETag, resp.LastModified, resp.Metadata), nil
}

func clip80(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// rangeTotal is the whole size a Content-Range header gives ("bytes 0-1023/5000": 5000).
func rangeTotal(v string) (int64, bool) {
	unit, rest, ok := strings.Cut(v, " ")
	if !ok || unit != "bytes" {
		return 0, false
	}
	_, total, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(total, 10, 64)
	return n, err == nil && n >= 0
}

// Generation returns the container's ETag. It changes when the container is deleted and
// created again (the storage wiped), and not when blobs in it are written or lost: a blob gone
// from the same generation was deleted, or lost in a rollback of the store's recent writes.
func (c *Container) Generation(ctx context.Context) (ETag, error) {
	resp, err := c.cc.GetProperties(ctx, nil)
	if err != nil {
		return "", translate("stat container "+c.name, err)
	}
	if resp.ETag == nil {
		return "", fmt.Errorf("stat container %s: no ETag", c.name)
	}
	return ETag(*resp.ETag), nil
}

// Delete removes a blob; a missing blob is not an error.
func (c *Container) Delete(ctx context.Context, name string) error {
	_, err := c.cc.NewBlobClient(name).Delete(ctx, nil)
	if err != nil {
		if err = translate("delete "+name, err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return err
	}
	return nil
}

// BatchMax is how many deletes one DeleteBatch request carries (the service's limit).
const BatchMax = 256

// DeleteBatch deletes names (blobs already gone count as deleted) in batch requests of up to
// BatchMax deletes each: one storage request for up to 256 blobs. It returns the first error;
// the names before it in a failed batch may be deleted or not. A service that refuses batches
// gets the deletes one by one.
func (c *Container) DeleteBatch(ctx context.Context, names []string) error {
	for len(names) > 0 {
		n := min(len(names), BatchMax)
		if err := c.deleteBatch(ctx, names[:n]); err != nil {
			return err
		}
		names = names[n:]
	}
	return nil
}

func (c *Container) deleteBatch(ctx context.Context, names []string) error {
	if len(names) == 1 {
		return c.Delete(ctx, names[0])
	}
	bb, err := c.cc.NewBatchBuilder()
	if err == nil {
		for _, name := range names {
			if err = bb.Delete(name, nil); err != nil {
				break
			}
		}
	}
	var resp container.SubmitBatchResponse
	if err == nil {
		resp, err = c.cc.SubmitBatch(ctx, bb, nil)
	}
	if err != nil {
		if ctx.Err() != nil {
			return translate("delete batch of "+c.name, err)
		}
		for _, name := range names { // the account does not take batches (or this one failed)
			if err := c.Delete(ctx, name); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range resp.Responses {
		if r.Error == nil {
			continue
		}
		name := ""
		if r.BlobName != nil {
			name = *r.BlobName
		}
		if err := translate("delete "+name, r.Error); !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	return nil
}

// List returns the blobs whose names start with prefix, in name order.
func (c *Container) List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error) {
	var out []jobs.BlobInfo
	pager := c.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, translate("list "+c.name+"/"+prefix, err)
		}
		for _, b := range page.Segment.BlobItems {
			info := jobs.BlobInfo{Name: *b.Name}
			if b.Properties != nil && b.Properties.ContentLength != nil {
				info.Size = *b.Properties.ContentLength
			}
			out = append(out, info)
		}
	}
	return out, nil
}

// Listed is a blob of a listing with its ETag.
type Listed struct {
	Name string
	ETag ETag
}

// ListETags returns the blobs whose names start with prefix, with their ETags, in name order: a
// caller that keeps what it read by ETag reads again only what changed.
func (c *Container) ListETags(ctx context.Context, prefix string) ([]Listed, error) {
	var out []Listed
	pager := c.cc.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, translate("list "+c.name+"/"+prefix, err)
		}
		for _, b := range page.Segment.BlobItems {
			l := Listed{Name: *b.Name}
			if b.Properties != nil && b.Properties.ETag != nil {
				l.ETag = ETag(*b.Properties.ETag)
			}
			out = append(out, l)
		}
	}
	return out, nil
}

// ListDirs returns the distinct name prefixes up to the first "/" after prefix ("virtual folders"),
// without the trailing "/", in name order.
func (c *Container) ListDirs(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	pager := c.cc.NewListBlobsHierarchyPager("/", &container.ListBlobsHierarchyOptions{Prefix: &prefix})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return nil, translate("list "+c.name+"/"+prefix, err)
		}
		for _, p := range page.Segment.BlobPrefixes {
			n := *p.Name
			out = append(out, n[:len(n)-1])
		}
	}
	return out, nil
}

// ReadRange reads count bytes of a blob from offset (fewer at its end; count 0: to the end). The reader resumes
// where it stopped after a failed read, so reading may take as long as the caller's context
// allows; it fails after StallTries requests in a row that yield no byte (ErrStalled).
func (c *Container) ReadRange(ctx context.Context, name string, offset, count int64) (io.ReadCloser, error) {
	return openResumable(ctx, name, offset, max(count, 0), func(ctx context.Context, off, n int64) (io.ReadCloser, int64, error) {
		return c.downloadRange(ctx, name, off, n)
	})
}

func translate(op string, err error) error {
	switch {
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound, bloberror.ResourceNotFound):
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists):
		return fmt.Errorf("%s: %w", op, ErrExists)
	case bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.TargetConditionNotMet):
		return fmt.Errorf("%s: %w", op, ErrConflict)
	}
	var re *azcore.ResponseError
	if errors.As(err, &re) && re.StatusCode == 412 {
		return fmt.Errorf("%s: %w", op, ErrConflict)
	}
	if errors.As(err, &re) && re.StatusCode == 404 {
		return fmt.Errorf("%s: %w", op, ErrNotFound)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Env gives jobs read access to any container of the account (jobs.Env).
type Env struct {
	client *azblob.Client
	jobs   string
	log    *slog.Logger
}

// NewEnv returns a jobs.Env over client.
func NewEnv(client *azblob.Client) *Env { return &Env{client: client} }

// WithJobsContainer returns a copy of e that names the cluster's jobs container (jobs.JobsEnv),
// where a jobs.BlobInput with a Job reads that job's output manifest.
func (e *Env) WithJobsContainer(name string) *Env { c := *e; c.jobs = name; return &c }

// JobsContainer implements jobs.JobsEnv: the container WithJobsContainer named, or
// jobs.DefaultJobsContainer.
func (e *Env) JobsContainer() string {
	if e.jobs == "" {
		return jobs.DefaultJobsContainer
	}
	return e.jobs
}

// WithLogger returns a copy of e whose Logger is log.
func (e *Env) WithLogger(log *slog.Logger) *Env { c := *e; c.log = log; return &c }

// Logger implements jobs.Env: the logger WithLogger set, or slog.Default(). A worker hands each
// shard attempt its own (jobs.EnvWithLogger), whose lines go to the job's log.
func (e *Env) Logger() *slog.Logger {
	if e.log == nil {
		return slog.Default()
	}
	return e.log
}

var _ jobs.Env = (*Env)(nil)

// ListBlobs implements jobs.Env.
func (e *Env) ListBlobs(ctx context.Context, containerName, prefix string) ([]jobs.BlobInfo, error) {
	return New(e.client, containerName).List(ctx, prefix)
}

// ContainerExists reports whether the account has container name (a HEAD of it). An error
// means it could not tell: storage failing, or a credential not allowed to read the container.
func (e *Env) ContainerExists(ctx context.Context, name string) (bool, error) {
	_, err := e.client.ServiceClient().NewContainerClient(name).GetProperties(ctx, nil)
	var re *azcore.ResponseError
	switch {
	case err == nil:
		return true, nil
	case bloberror.HasCode(err, bloberror.ContainerNotFound), errors.As(err, &re) && re.StatusCode == 404:
		return false, nil
	}
	return false, translate("read container "+name, err)
}

// ReadRange implements jobs.Env.
func (e *Env) ReadRange(ctx context.Context, containerName, name string, offset, count int64) (io.ReadCloser, error) {
	return New(e.client, containerName).ReadRange(ctx, name, offset, count)
}
