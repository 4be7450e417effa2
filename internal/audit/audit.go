package audit

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/mapagg/mapagg/client"
)

// Prefix is where the audit trail lives in the jobs container: one small blob an entry,
// named so that a listing returns the newest first. The "_" keeps it apart from job ids.
const Prefix = "_audit/"

// Entry is one accepted mutating call: who made it, when, and on what.
type Entry struct {
	// ID names the entry; entries sort newest first by it (Filter.Before).
	ID string    `json:"id"`
	At time.Time `json:"at"`
	// Actor is the token's name ("dashboard" for a --dashboard-cancel action, "cli:USER" for
	// the command line); Role its role.
	Actor string `json:"actor"`
	Role  string `json:"role,omitempty"`
	// Action is what was done: job.submit, job.cancel, job.retry, job.delete, schedule.add,
	// schedule.delete, schedule.pause, schedule.resume, schedule.trigger.
	Action string `json:"action"`
	// Job is the job acted on (or submitted); Created the job a retry or trigger made.
	Job      string `json:"job,omitempty"`
	Created  string `json:"created,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	// Status is the HTTP status answered (0 from the command line); Remote the caller's address.
	Status int    `json:"status,omitempty"`
	Remote string `json:"remote,omitempty"`
}

// Filter selects entries, newest first.
type Filter struct {
	// Limit is the most entries returned: 1 to 1000, default 100.
	Limit int
	// Before returns only entries older than this entry id (the previous page's Next).
	Before string
	// Job and Actor keep only the entries about this job (acted on or created) or by this actor.
	Job, Actor string
}

// Page is one page of entries, newest first; Next is Before of the next page ("" at the end).
type Page struct {
	Entries []Entry `json:"entries"`
	Next    string  `json:"next,omitempty"`
}

// Log keeps the audit trail in the jobs container.
type Log struct {
	cc  *container.Client
	now func() time.Time
}

// NewLog returns the audit trail of containerName (the jobs container).
func NewLog(bc *azblob.Client, containerName string) *Log {
	return &Log{cc: bc.ServiceClient().NewContainerClient(containerName), now: time.Now}
}

// auditName is the blob of an entry made at t: the nanoseconds left until the year 2262, so that
// names sort newest first, and random hex so that two at one instant do not collide.
func auditName(t time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s%019d-%s", Prefix, math.MaxInt64-t.UnixNano(), hex.EncodeToString(b[:]))
}

// Record stores e (its ID and, when zero, At are set here).
func (a *Log) Record(ctx context.Context, e Entry) error {
	if e.At.IsZero() {
		e.At = a.now()
	}
	e.At = e.At.UTC()
	name := auditName(e.At)
	e.ID = strings.TrimPrefix(name, Prefix)
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	md := map[string]*string{"entry": to.Ptr(hex.EncodeToString(data))}
	_, err = a.cc.NewBlockBlobClient(name).UploadBuffer(ctx, data, &blockblob.UploadBufferOptions{
		Metadata:         md,
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: to.Ptr(azcore.ETagAny)}},
	})
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		return fmt.Errorf("record audit entry: the jobs container does not exist: %w", err)
	}
	if err != nil {
		return fmt.Errorf("record audit entry: %w", err)
	}
	return nil
}

// List returns the entries f selects, newest first, from one listing (each entry travels in its
// blob's metadata, so no blob is read).
func (a *Log) List(ctx context.Context, f Filter) (*Page, error) {
	limit := cmp.Or(f.Limit, 100)
	if limit < 1 || limit > 1000 {
		return nil, fmt.Errorf("%w: audit limit %d: use 1 to 1000", client.ErrBadSpec, f.Limit)
	}
	if f.Before != "" && !validAuditID(f.Before) {
		return nil, fmt.Errorf("%w: audit cursor %q: use the next of a previous page", client.ErrBadSpec, clip(f.Before))
	}
	page := &Page{Entries: []Entry{}}
	opts := &container.ListBlobsFlatOptions{Prefix: to.Ptr(Prefix), Include: container.ListBlobsInclude{Metadata: true}}
	pager := a.cc.NewListBlobsFlatPager(opts)
	var last string
	for pager.More() {
		resp, err := pager.NextPage(ctx)
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			return page, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list the audit trail: %w", err)
		}
		for _, b := range resp.Segment.BlobItems {
			id := strings.TrimPrefix(*b.Name, Prefix)
			if f.Before != "" && id <= f.Before {
				continue
			}
			e, err := decodeAuditMeta(id, b.Metadata)
			if err != nil {
				continue // not ours or damaged: the trail goes on
			}
			if f.Job != "" && e.Job != f.Job && e.Created != f.Job {
				continue
			}
			if f.Actor != "" && e.Actor != f.Actor {
				continue
			}
			if len(page.Entries) == limit {
				page.Next = last
				return page, nil
			}
			page.Entries = append(page.Entries, e)
			last = id
		}
	}
	return page, nil
}

func validAuditID(id string) bool {
	ts, rnd, ok := strings.Cut(id, "-")
	if !ok || len(ts) != 19 || len(rnd) != 8 {
		return false
	}
	if _, err := strconv.ParseUint(ts, 10, 64); err != nil {
		return false
	}
	_, err := hex.DecodeString(rnd)
	return err == nil
}

// decodeAuditMeta reads an entry from its blob's metadata (key "entry", hex of its JSON).
func decodeAuditMeta(id string, md map[string]*string) (Entry, error) {
	var v *string
	for k, x := range md {
		if strings.EqualFold(k, "entry") {
			v = x
		}
	}
	if v == nil {
		return Entry{}, errors.New("no entry metadata")
	}
	e, err := DecodeEntry([]byte(*v))
	if err != nil {
		return Entry{}, err
	}
	e.ID = id
	return e, nil
}

// DecodeEntry decodes an entry as stored in metadata: the hex of its JSON.
func DecodeEntry(hexJSON []byte) (Entry, error) {
	data := make([]byte, hex.DecodedLen(len(hexJSON)))
	if _, err := hex.Decode(data, hexJSON); err != nil {
		return Entry{}, fmt.Errorf("audit entry: %w", err)
	}
	var e Entry
	if err := json.Unmarshal(data, &e); err != nil {
		return Entry{}, fmt.Errorf("audit entry: %w", err)
	}
	if e.Action == "" || e.At.IsZero() {
		return Entry{}, errors.New("audit entry: no action or time")
	}
	return e, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:79] + "…"
	}
	return s
}
