package jobstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/store"
)

// A submit may be answered with an error although its job was created (a 5xx or a timeout after
// the spec was written). A submitter that sends an idempotency key may then retry: the first
// submit under a key stores key → job id (If-None-Match, so of two concurrent submits with one
// key one stores it and the other reads it), and every repeat within IdempotencyWindow returns
// that id and creates nothing. A repeat that finds the first submit unfinished (its spec never
// written, or removed when queueing failed) finishes it under the same id: the spec's own
// If-None-Match makes that one job however many repeats race.

// IdempotencyWindow is how long a key names its first job.
const IdempotencyWindow = 24 * time.Hour

// MaxIdempotencyKey is the longest key.
const MaxIdempotencyKey = 255

// IdempotencyPrefix is where key records live in the jobs container, beside the jobs' folders
// ('_' is never in a job id, so listings of jobs skip it).
const IdempotencyPrefix = "_idempotency/"

// ErrKeyReused: the key was used within IdempotencyWindow for a different job (another type,
// other parameters, dependencies, priority, retries or output format).
var ErrKeyReused = errors.New("idempotency key already used for a different job")

// CheckIdempotencyKey reports what is wrong with a key: 1 to 255 printable ASCII characters.
func CheckIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKey {
		return fmt.Errorf("idempotency key: %d characters, want 1 to %d", len(key), MaxIdempotencyKey)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("idempotency key: byte %d is not printable ASCII; use letters, digits and punctuation (a UUID is typical)", i)
		}
	}
	return nil
}

// IdempotencyBlob is the blob recording key (named by its SHA-256, so any key makes a valid name
// and none is stored in clear).
func IdempotencyBlob(key string) string {
	sum := sha256.Sum256([]byte(key))
	return IdempotencyPrefix + hex.EncodeToString(sum[:])
}

// keyRecord is the content of an idempotency blob.
type keyRecord struct {
	Job     string    `json:"job"`
	At      time.Time `json:"at"`
	Request string    `json:"request"` // hash of what was asked: a repeat must ask the same
	Done    bool      `json:"done"`    // the job was submitted (its spec written and its id queued)
}

// requestHash identifies what a submit asks for, apart from its id and time. A field added
// later is left out when empty, so a key recorded by an earlier build still matches.
func requestHash(spec *protocol.Spec) string {
	h := sha256.New()
	b, _ := json.Marshal(struct {
		Type         string
		Params       json.RawMessage
		After        []string
		Priority     int
		Retries      int
		OutputFormat string `json:",omitempty"`
	}{spec.Type, compact(spec.Params), spec.After, spec.Priority, spec.Retries, spec.OutputFormat})
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return raw
	}
	return buf.Bytes()
}

// SubmitOnce is Submit under an idempotency key (CheckIdempotencyKey): the first call within
// IdempotencyWindow submits spec; every later call with the same key returns the first call's
// job id with created false and writes no new job. A repeat that asks for a different job fails
// with ErrKeyReused. now is the submission time (spec.SubmittedAt).
func (j *Jobs) SubmitOnce(ctx context.Context, spec *protocol.Spec, key string, now time.Time) (id string, created bool, err error) {
	if err := CheckIdempotencyKey(key); err != nil {
		return "", false, err
	}
	name := IdempotencyBlob(key)
	rec := keyRecord{Job: spec.ID, At: now.UTC(), Request: requestHash(spec)}
	for try := 0; ; try++ {
		data, _ := json.Marshal(rec)
		etag, err := j.Store.Put(ctx, name, data, store.Cond{IfNoneMatch: true})
		if err == nil {
			return j.submitKeyed(ctx, spec, name, rec, etag)
		}
		if !errors.Is(err, store.ErrExists) {
			return "", false, fmt.Errorf("record idempotency key: %w", err)
		}
		old, oldTag, err := j.readKey(ctx, name)
		if errors.Is(err, store.ErrNotFound) && try < 3 {
			continue // expired and removed meanwhile
		}
		if err != nil {
			return "", false, err
		}
		if now.Sub(old.At) >= IdempotencyWindow {
			// Expired: the key names a new job now (conditional: one of two takers wins).
			etag, err := j.Store.Put(ctx, name, data, store.Cond{IfMatch: oldTag})
			if errors.Is(err, store.ErrConflict) && try < 3 {
				continue
			}
			if err != nil {
				return "", false, fmt.Errorf("record idempotency key: %w", err)
			}
			return j.submitKeyed(ctx, spec, name, rec, etag)
		}
		if old.Request != rec.Request {
			return "", false, fmt.Errorf("%w: it names job %s, submitted %s; use a new key for a new job",
				ErrKeyReused, old.Job, old.At.Format(time.RFC3339))
		}
		if old.Done {
			return old.Job, false, nil
		}
		// The first submit under this key has not finished (or failed half-way): the job is
		// there if its spec is; otherwise finish it under the first submit's id.
		ok, err := j.Store.Exists(ctx, protocol.SpecBlob(old.Job))
		if err != nil {
			return "", false, err
		}
		if ok {
			return old.Job, false, nil
		}
		spec.ID = old.Job
		return j.submitKeyed(ctx, spec, name, old, oldTag)
	}
}

// submitKeyed submits spec under the key record rec (stored with etag) and marks it done. A spec
// already stored under the id (a concurrent repeat wrote it) counts as this submit's.
func (j *Jobs) submitKeyed(ctx context.Context, spec *protocol.Spec, name string, rec keyRecord, etag store.ETag) (string, bool, error) {
	err := j.Submit(ctx, spec)
	if errors.Is(err, store.ErrExists) {
		return spec.ID, false, nil
	}
	if err != nil {
		return "", false, err
	}
	rec.Done = true
	if data, merr := json.Marshal(rec); merr == nil {
		// Best effort: an unmarked record still finds the job by its spec.
		_, _ = j.Store.Put(context.WithoutCancel(ctx), name, data, store.Cond{IfMatch: etag})
	}
	return spec.ID, true, nil
}

func (j *Jobs) readKey(ctx context.Context, name string) (keyRecord, store.ETag, error) {
	data, etag, err := j.Store.Get(ctx, name)
	if err != nil {
		return keyRecord{}, "", err
	}
	var rec keyRecord
	if err := json.Unmarshal(data, &rec); err != nil || protocol.CheckID(rec.Job) != nil {
		return keyRecord{}, "", fmt.Errorf("idempotency record %s is damaged: %v", name, err)
	}
	return rec, etag, nil
}

// ExpiredKeys returns the idempotency records older than IdempotencyWindow at now (for
// retention: the leader deletes them).
func (j *Jobs) ExpiredKeys(ctx context.Context, now time.Time) ([]string, error) {
	blobs, err := j.Store.List(ctx, IdempotencyPrefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, b := range blobs {
		rec, _, err := j.readKey(ctx, b.Name)
		if err != nil || now.Sub(rec.At) >= IdempotencyWindow {
			out = append(out, b.Name)
		}
	}
	return out, nil
}
