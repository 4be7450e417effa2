package client

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/mapagg/mapagg/internal/jobstore"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/internal/telemetry"
	"github.com/mapagg/mapagg/jobs"
	"github.com/mapagg/mapagg/store"
)

// Store is the jobs container (store.Container is one). A Store that can also list blobs by
// prefix serves schedules and Delete; one that can stream a range of a blob serves WriteOutput.
type Store interface {
	Get(ctx context.Context, name string) ([]byte, store.ETag, error)
	Put(ctx context.Context, name string, data []byte, cond store.Cond) (store.ETag, error)
	Delete(ctx context.Context, name string) error
	Exists(ctx context.Context, name string) (bool, error)
	ListDirs(ctx context.Context, prefix string) ([]string, error)
	// Props reads a blob's size, ETag and metadata (status records), not its content.
	Props(ctx context.Context, name string) (store.Props, error)
}

// Queue is the job intake queue.
type Queue interface {
	Enqueue(ctx context.Context, text string) error
}

// Notifier sends best-effort hints to the leader (bus.Bus.Announce); may be nil.
type Notifier interface {
	Announce(subject string, data []byte) error
}

// Validator checks a job type and its parameters where the type is known: the running cluster
// (node's NATS validator asks a live worker that has the type). It returns nil, an
// *jobs.UnknownTypeError listing the types the cluster knows, the job's own error (a
// *jobs.ParamError, matching jobs.ErrBadParams), or an error saying why it could not ask.
type Validator interface {
	ValidateJob(ctx context.Context, typ string, params json.RawMessage) error
}

// Client submits and inspects jobs. Store and Queue are required; the rest is optional.
type Client struct {
	Store  Store
	Queue  Queue
	Notify Notifier // optional: wakes the leader sooner
	// InlineSpec puts a small job's spec into its queue message, one storage read fewer a job
	// (jobstore.Jobs.InlineSpec). Only for a cluster whose every member runs this release or later.
	InlineSpec bool

	// Registry holds the job types this program has, validated locally (no cluster needed).
	// Nil: none.
	Registry *jobs.Registry
	// Validator validates the types Registry lacks. Nil: such a type is refused as unknown.
	Validator Validator
	// Containers, when set, lets Submit and Retry refuse a job whose input container
	// (parameter "container") does not exist (ErrNoSuchContainer). New sets it. Nil: not checked.
	Containers ContainerChecker

	Now func() time.Time // default time.Now

	// Cache, when set, keeps ended jobs' statuses for Query and List (a long-lived client). Nil:
	// every call reads every status.
	Cache *StatusCache

	close func()    // set by New
	ends  *endWatch // set by New when connected to NATS: wakes Wait when a job ends
}

// Errors.
var (
	ErrNoSuchJob   = jobstore.ErrNoSuchJob
	ErrNotFinished = errors.New("job has not finished")
	// ErrBadSpec is matched by an error about a submitted job's fields (priority, retries,
	// after, output_format, type, params that are not JSON): each says which field and what is
	// allowed.
	ErrBadSpec = protocol.ErrBadSpec
)

// Refused reports whether err says that what was submitted is wrong: an unknown type
// (jobs.ErrUnknownType), bad parameters (jobs.ErrBadParams; a missing input container,
// ErrNoSuchContainer, is one), a bad field (ErrBadSpec) or a
// malformed job id. The CLI shows it as a usage error, the HTTP API as a 400; neither checks
// anything itself.
func Refused(err error) bool {
	return errors.Is(err, jobs.ErrUnknownType) || errors.Is(err, jobs.ErrBadParams) ||
		errors.Is(err, protocol.ErrBadSpec) || errors.Is(err, protocol.ErrBadID)
}

// Status is a job as `worker status` shows it.
type Status struct {
	ID          string     `json:"id"`
	Type        string     `json:"type"`
	State       jobs.State `json:"state"`
	ShardsTotal int        `json:"shards_total"`
	ShardsDone  int        `json:"shards_done"`
	Error       string     `json:"error,omitempty"`
	SubmittedAt time.Time  `json:"submitted_at"`
	UpdatedAt   *time.Time `json:"updated_at,omitempty"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	PlanEpoch   uint64     `json:"plan_epoch,omitempty"`
	Epoch       uint64     `json:"epoch,omitempty"` // epoch of the leader that last checkpointed it
	Duplicates  int64      `json:"duplicates"`      // results dropped because their shard was already merged
	// Unreadable is set (and State is StateUnreadable) when List could not read this job's spec
	// or status record: it says why, so one damaged job does not hide the others.
	Unreadable string `json:"unreadable,omitempty"`
	// Priority orders the job against running jobs of its type (higher: a larger share).
	Priority int `json:"priority"`
	// Phase is the job's stage when it has several ("map", "reduce"); empty otherwise.
	// PhaseDone of PhaseTotal tasks of the phase are done.
	Phase      string     `json:"phase,omitempty"`
	PhaseDone  int        `json:"phase_done,omitempty"`
	PhaseTotal int        `json:"phase_total,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	// Share is the fraction of its type's dispatch a running job gets, among the jobs List
	// returned (0: not running, or Status of one job).
	Share float64 `json:"share,omitempty"`
	// Position is a queued job's place among the queued jobs List returned (1: next).
	Position int `json:"queue_position,omitempty"`
	// Note says how the status was read when it is not from a status record.
	Note string `json:"note,omitempty"`
	// Schedule and Tick: the schedule and tick that made the job; After: the jobs it waits
	// for; RetryOf: the job it retries.
	Schedule string     `json:"schedule,omitempty"`
	Tick     *time.Time `json:"tick,omitempty"`
	After    []string   `json:"after,omitempty"`
	RetryOf  string     `json:"retry_of,omitempty"`
	// Result is set by Wait for a job that succeeded; Status never reads it.
	Result json.RawMessage `json:"-"`
}

// StateUnknown is the State of a job whose large checkpoint an earlier build wrote, without a
// status record (Status.Note says so). It is not a state a job is ever stored in.
const StateUnknown = jobstore.StateUnknown

// StateUnreadable is the State List reports for a job whose spec or checkpoint cannot be read
// or decoded (Status.Unreadable says why). It is not a state a job is ever stored in.
const StateUnreadable jobs.State = "unreadable"

func (c *Client) now() time.Time {
	if c.Now == nil {
		return time.Now()
	}
	return c.Now()
}

// Spec is a job as Submit writes it.
type Spec struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Params      json.RawMessage `json:"params"`
	SubmittedAt time.Time       `json:"submitted_at"`
	Priority    int             `json:"priority,omitempty"`
	// OutputFormat is how a keyed job stores its output blobs (WithOutputFormat); "": the default.
	OutputFormat string `json:"output_format,omitempty"`
}

// fromSpec is the client's view of a stored spec.
func fromSpec(s *protocol.Spec) *Spec {
	return &Spec{ID: s.ID, Type: s.Type, Params: s.Params, SubmittedAt: s.SubmittedAt, Priority: s.Priority, OutputFormat: s.OutputFormat}
}

// Validate checks a job type and its parameters without writing anything, and returns the spec
// Submit would write. A type in Registry is validated locally; any other goes to Validator.
func (c *Client) Validate(ctx context.Context, typ string, params json.RawMessage) (*Spec, error) {
	spec, err := c.validate(ctx, typ, params, submitOptions{})
	if err != nil {
		return nil, err
	}
	return fromSpec(spec), nil
}

// validate is the one validation of a new job: its fields by their rules (protocol.Spec's, one
// message each), then its type and parameters where the type is known. It returns the spec to
// write.
func (c *Client) validate(ctx context.Context, typ string, params json.RawMessage, o submitOptions) (*protocol.Spec, error) {
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	now := c.now()
	spec := &protocol.Spec{ID: protocol.NewID(now), Type: typ, Params: params, SubmittedAt: now.UTC(),
		Priority: o.priority, After: o.after, Retries: o.retries, OutputFormat: o.outputFormat}
	if _, err := spec.Encode(); err != nil {
		return nil, err
	}
	if err := c.check(ctx, typ, params); err != nil {
		return nil, err
	}
	return spec, nil
}

// check validates a job type and its parameters: locally when Registry has the type, else by
// Validator (the running cluster).
func (c *Client) check(ctx context.Context, typ string, params json.RawMessage) error {
	var job jobs.Job
	var err error
	if c.Registry != nil {
		job, err = c.Registry.Lookup(typ)
	} else {
		err = &jobs.UnknownTypeError{Type: typ}
	}
	switch {
	case err == nil:
		return job.Validate(params)
	case errors.Is(err, jobs.ErrUnknownType) && c.Validator != nil:
		return c.Validator.ValidateJob(ctx, typ, params)
	default:
		return err
	}
}

// jobStore is the client's door to jobstore, where a job's life in storage is written once.
func (c *Client) jobStore() *jobstore.Jobs {
	j := &jobstore.Jobs{Store: listingStore{c.Store}, Queue: c.Queue, InlineSpec: c.InlineSpec}
	if c.Notify != nil {
		j.Notify = c.Notify
	}
	if p, ok := c.Notify.(messagePurger); ok {
		j.Purge = p
	}
	return j
}

// listingStore is Client.Store with List when it has one (store.Container does).
type listingStore struct{ Store }

func (s listingStore) List(ctx context.Context, prefix string) ([]jobs.BlobInfo, error) {
	if l, ok := s.Store.(blobLister); ok {
		return l.List(ctx, prefix)
	}
	return nil, errors.New("this client's store cannot list blobs")
}

// SubmitOption sets an optional field of a submitted job.
type SubmitOption func(*submitOptions)

type submitOptions struct {
	priority     int
	after        []string
	retries      int
	key          string
	outputFormat string
}

// WithIdempotencyKey makes a submit safe to repeat: the first submit under key (1 to 255
// printable ASCII characters, e.g. a UUID) creates the job, and every submit with the same key
// within a day returns that job's id and creates nothing, however many run at once. Submit then
// also retries a failure that is not the job's fault (storage unavailable, a timeout) a few
// times itself. A repeat that asks for another job (type, params, dependencies, priority,
// retries, output format) fails with ErrKeyReused.
func WithIdempotencyKey(key string) SubmitOption { return func(o *submitOptions) { o.key = key } }

// ErrKeyReused: an idempotency key was used within a day for a different job.
var ErrKeyReused = jobstore.ErrKeyReused

// Retries of a submit with an idempotency key.
const (
	keyedTries = 4
	keyedPause = 250 * time.Millisecond
)

// WithPriority sets a job's priority, MinPriority to MaxPriority (default 0): each step up
// doubles its share of dispatch against running jobs of its type.
func WithPriority(p int) SubmitOption { return func(o *submitOptions) { o.priority = p } }

// WithOutputFormat sets how a keyed job stores its output blobs: "tsv", "jsonl", "tsv.zst" or
// "jsonl.zst" (".zst": compressed with zstd). The default is TSV for a job whose keys are text
// and JSON lines otherwise. Submit refuses an unknown format (ErrBadSpec, naming output_format).
// Output reads give the same records whatever the stored format.
func WithOutputFormat(f string) SubmitOption { return func(o *submitOptions) { o.outputFormat = f } }

// The range of a job's priority.
const (
	MinPriority = protocol.MinPriority
	MaxPriority = protocol.MaxPriority
)

// Submit validates a job once (its fields, then its type and parameters, locally or by the
// cluster), checks that its input container (when Containers is set) and the jobs it runs after
// exist, writes its spec (If-None-Match) and queues
// its id. It returns the id. An error for which Refused is true means the job was wrong, and
// nothing was written.
func (c *Client) Submit(ctx context.Context, typ string, params json.RawMessage, opts ...SubmitOption) (string, error) {
	var o submitOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.key != "" {
		if err := jobstore.CheckIdempotencyKey(o.key); err != nil {
			return "", fmt.Errorf("%w: %w", protocol.ErrBadSpec, err)
		}
	}
	start := time.Now()
	spec, err := c.validate(ctx, typ, params, o)
	if err != nil {
		return "", err
	}
	if err := c.checkInput(ctx, spec.Type, spec.Params); err != nil {
		return "", err
	}
	if err := c.checkAfter(ctx, spec.After); err != nil {
		return "", err
	}
	id := spec.ID
	if o.key == "" {
		err = c.jobStore().Submit(ctx, spec)
	} else {
		id, err = c.submitOnce(ctx, spec, o.key)
	}
	// The job's trace has its "submit" span (a no-op unless ctx carries tracing).
	telemetry.Record(ctx, cmp.Or(id, spec.ID), "submit", start, err, attribute.String("mapagg.type", spec.Type))
	if err != nil {
		return "", err
	}
	return id, nil
}

// submitOnce submits spec under an idempotency key, trying again (the key makes it safe) when
// storage fails, up to keyedTries times.
func (c *Client) submitOnce(ctx context.Context, spec *protocol.Spec, key string) (string, error) {
	pause := keyedPause
	for try := 1; ; try++ {
		id, _, err := c.jobStore().SubmitOnce(ctx, spec, key, spec.SubmittedAt)
		if err == nil {
			return id, nil
		}
		if try >= keyedTries || Refused(err) || errors.Is(err, ErrKeyReused) || ctx.Err() != nil {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(pause):
		}
		pause *= 2
	}
}

// Status reads one job's state: its status record (the metadata of its checkpoint blob, read
// with a HEAD) and, for a job not yet planned, its spec. It never downloads a checkpoint or a
// result, whatever the job's size, except a small checkpoint of an earlier build (legacy).
func (c *Client) Status(ctx context.Context, id string) (*Status, error) {
	st, err := c.jobStore().Status(ctx, id)
	if err != nil {
		return nil, err
	}
	out := fromRecord(&st.StatusRecord)
	out.Note = st.Note
	return out, nil
}

func fromRecord(r *protocol.StatusRecord) *Status {
	st := &Status{ID: r.Job, Type: r.Type, State: r.State, Phase: r.Phase, ShardsTotal: r.Total, ShardsDone: r.Done,
		Error: r.Error, SubmittedAt: r.SubmittedAt, FinishedAt: r.FinishedAt, PhaseDone: r.PhaseDone, PhaseTotal: r.PhaseTotal, PlanEpoch: r.PlanEpoch, Epoch: r.Epoch,
		Duplicates: r.Duplicates, Priority: r.Priority, Schedule: r.Schedule, Tick: r.Tick, After: r.After, RetryOf: r.RetryOf}
	if !r.UpdatedAt.IsZero() {
		upd := r.UpdatedAt
		st.UpdatedAt = &upd
	}
	if !r.StartedAt.IsZero() {
		started := r.StartedAt
		st.StartedAt = &started
	}
	return st
}

// List returns the status of the limit most recent jobs (all when limit <= 0), newest last. Job ids
// sort by submission time to the second; jobs submitted within one second are in no given order.
// Statuses are read in parallel, metadata only; a job that cannot be read is listed as
// StateUnreadable with the reason. Running jobs get their Share, queued ones their Position,
// among the jobs listed.
func (c *Client) List(ctx context.Context, limit int) ([]Status, error) {
	dirs, err := c.Store.ListDirs(ctx, "")
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	var ids []string
	for _, d := range dirs {
		if jobDir(d) {
			ids = append(ids, d)
		}
	}
	sort.Strings(ids)
	slices.Reverse(ids)
	// Newest first until limit jobs are found: a folder without a spec (e.g. wordcount input
	// data) does not count towards the limit.
	var out []Status
	for len(ids) > 0 && (limit <= 0 || len(out) < limit) {
		n := min(len(ids), listParallel)
		if limit > 0 {
			n = min(n, max(limit-len(out), 4))
		}
		batch := make([]*Status, n)
		var g errgroup.Group
		for i, id := range ids[:n] {
			g.Go(func() error {
				// One slow job (a storage call that hangs) shows as unreadable, not the list.
				sctx, cancel := context.WithTimeout(ctx, listJobTimeout)
				defer cancel()
				st, err := c.Status(sctx, id)
				switch {
				case errors.Is(err, ErrNoSuchJob):
				case err != nil:
					// One damaged job must not hide the others: show it with what is wrong.
					batch[i] = &Status{ID: id, State: StateUnreadable, Unreadable: err.Error()}
				default:
					batch[i] = st
				}
				return nil
			})
		}
		_ = g.Wait()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("list jobs: %w", err)
		}
		for _, st := range batch {
			if st != nil && (limit <= 0 || len(out) < limit) {
				out = append(out, *st)
			}
		}
		ids = ids[n:]
	}
	slices.Reverse(out)
	shares(out)
	return out, nil
}

// listParallel bounds the statuses List reads at once.
const listParallel = 16

// listJobTimeout bounds the time List waits for one job's status; a job that takes longer is
// listed as StateUnreadable.
const listJobTimeout = 2 * time.Second

// shares sets each running job's Share of its type's dispatch (the leader splits it by
// protocol.PriorityWeight) and each queued job's Position (1: taken next), among list.
func shares(list []Status) {
	sum := map[string]float64{}
	for _, s := range list {
		if s.State == jobs.StateRunning && s.ShardsDone < s.ShardsTotal {
			sum[s.Type] += protocol.PriorityWeight(s.Priority)
		}
	}
	pos := 0
	for i := range list {
		s := &list[i]
		switch {
		case s.State == jobs.StateRunning && s.ShardsDone < s.ShardsTotal:
			s.Share = protocol.PriorityWeight(s.Priority) / sum[s.Type]
		case s.State == jobs.StateQueued:
			pos++
			s.Position = pos
		}
	}
}

// Result returns a finished job's result JSON.
func (c *Client) Result(ctx context.Context, id string) (json.RawMessage, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.ResultOf(ctx, st)
}

// ResultOf is Result for a job whose status st the caller has just read: it does not read the
// status again (one storage read fewer; a caller polling Status uses it).
func (c *Client) ResultOf(ctx context.Context, st *Status) (json.RawMessage, error) {
	switch st.State {
	case jobs.StateSucceeded:
		if st.Result != nil {
			return st.Result, nil
		}
		return c.result(ctx, st.ID)
	case jobs.StateFailed, jobs.StateCancelled:
		return nil, fmt.Errorf("job %s %s: %s", st.ID, st.State, st.Error)
	default:
		return nil, fmt.Errorf("%w: job %s is %s (%d of %d shards done)", ErrNotFinished, st.ID, st.State, st.ShardsDone, st.ShardsTotal)
	}
}

// result reads a succeeded job's result from its final checkpoint, or from the copy
// (<job>/result.json) when the checkpoint says it was stored there and dropped. The checkpoint
// comes first: most results (an aggregate's few bytes) stay in it and never get a copy, so
// reading the copy first cost those a request that found nothing; a result with a copy (a keyed
// job's manifest, a large aggregate) costs one small read more.
func (c *Client) result(ctx context.Context, id string) (json.RawMessage, error) {
	data, _, err := c.Store.Get(ctx, protocol.CheckpointBlob(id))
	if err != nil {
		return nil, err
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil {
		return nil, err
	}
	return c.resultOf(ctx, id, cp)
}

// resultOf is the result of job id, whose final checkpoint is cp.
func (c *Client) resultOf(ctx context.Context, id string, cp *protocol.Checkpoint) (json.RawMessage, error) {
	if cp.Result != nil && !cp.ResultStored {
		return cp.Result, nil
	}
	data, _, err := c.Store.Get(ctx, protocol.ResultBlob(id))
	if errors.Is(err, store.ErrNotFound) && !cp.ResultStored {
		return cp.Result, nil // no result, and no copy of one
	}
	return data, err
}

// Cancel asks the leader to cancel a job: it leaves a marker in storage (read by every leader)
// and sends a hint over NATS.
func (c *Client) Cancel(ctx context.Context, id string) (*Status, error) {
	st, err := c.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	if st.State.Terminal() {
		return st, fmt.Errorf("job %s has already %s", id, st.State)
	}
	if _, err := c.Store.Put(ctx, protocol.CancelBlob(id), []byte(c.now().UTC().Format(time.RFC3339Nano)), store.Cond{}); err != nil {
		return nil, fmt.Errorf("write cancel marker: %w", err)
	}
	if c.Notify != nil {
		_ = c.Notify.Announce(protocol.CtlCancel, []byte(id))
	}
	return st, nil
}

// Wait polls a job until it ends or ctx does, calling progress (if not nil) on every change.
func (c *Client) Wait(ctx context.Context, id string, every time.Duration, progress func(Status)) (*Status, error) {
	var last Status
	var ended <-chan struct{}
	if c.ends != nil {
		ch, stop := c.ends.watch(id)
		defer stop()
		ended = ch
	}
	woke := false
	for {
		// Woken by an end event, one read gives the status and the result (endedRead); a poll,
		// or a read that does not give both, reads the status record alone.
		var (
			st   *Status
			read bool // st.Result was read too
			err  error
		)
		if woke {
			st, read = c.endedRead(ctx, id)
		}
		if st == nil {
			st, err = c.Status(ctx, id)
		}
		if err != nil && !isTransient(err) {
			return nil, err
		}
		if err == nil {
			if progress != nil && (st.State != last.State || st.ShardsDone != last.ShardsDone || st.ShardsTotal != last.ShardsTotal) {
				progress(*st)
			}
			last = *st
			if st.State.Terminal() {
				if st.State == jobs.StateSucceeded && !read {
					if st.Result, err = c.result(ctx, id); err != nil {
						return st, fmt.Errorf("result of %s: %w", id, err)
					}
				}
				return st, nil
			}
		}
		woke = false
		select {
		case <-ctx.Done():
			return &last, ctx.Err()
		case <-time.After(every):
		case <-ended:
			woke = true
		}
	}
}

// endedHead is how much of a checkpoint endedRead reads: a final checkpoint whose result is
// inline is rarely bigger, and a forged end event costs no more than this.
const endedHead = 64 << 10

// headGetter reads a blob's head with its metadata in one request (store.Container).
type headGetter interface {
	GetHead(ctx context.Context, name string, limit int64) ([]byte, store.Props, error)
}

// endedRead reads job id's status record and, for a job that succeeded, its result with one
// request: the checkpoint's first endedHead bytes and its metadata. read says the result was
// read. It returns a nil status when that one read cannot say (the store cannot, the read
// failed, the record is not one a Status read would give as is), and a status without the
// result when the job succeeded with a checkpoint bigger than the head: the caller reads on.
func (c *Client) endedRead(ctx context.Context, id string) (st *Status, read bool) {
	g, ok := c.Store.(headGetter)
	if !ok || protocol.CheckID(id) != nil {
		return nil, false
	}
	data, p, err := g.GetHead(ctx, protocol.CheckpointBlob(id), endedHead)
	if err != nil {
		return nil, false
	}
	rec, err := protocol.DecodeStatusRecord(p.Meta)
	if err != nil || rec.SubmittedAt.IsZero() || rec.Job != id {
		return nil, false // an earlier build's checkpoint, or a record that needs the spec
	}
	st = fromRecord(rec)
	if st.State != jobs.StateSucceeded || int64(len(data)) != p.Size {
		return st, false
	}
	cp, err := protocol.DecodeCheckpoint(data)
	if err != nil || cp.Job != id {
		return st, false
	}
	if st.Result, err = c.resultOf(ctx, id, cp); err != nil {
		return st, false
	}
	return st, true
}

func isTransient(err error) bool {
	for _, perm := range []error{ErrNoSuchJob, protocol.ErrBadID, protocol.ErrBadSpec, jobs.ErrBadCheckpoint, protocol.ErrBadStatusRecord} {
		if errors.Is(err, perm) {
			return false
		}
	}
	return true
}
