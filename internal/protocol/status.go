package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/mapagg/mapagg/jobs"
)

// StatusRecordVersion is the status record format written by this build.
const StatusRecordVersion = 1

// StatusMetaKey is the metadata key of the checkpoint blob that holds its StatusRecord.
const StatusMetaKey = "status"

// MaxStatusError bounds the error a status record carries; the checkpoint keeps it whole.
const MaxStatusError = 2048

// maxStatusValue bounds an encoded record: Azure allows 8 KiB of metadata per blob.
const maxStatusValue = 6144

// ErrNoStatusRecord: the checkpoint has no status record (written by an earlier build).
var ErrNoStatusRecord = errors.New("no status record")

// ErrBadStatusRecord is matched by every error DecodeStatusRecord returns for a malformed record.
var ErrBadStatusRecord = errors.New("bad status record")

// StatusRecord is what status shows of a job, stored as metadata of its checkpoint blob.
// It is written by the same conditional write as the checkpoint, so it is fenced like the
// checkpoint and never disagrees with it; reading it (a HEAD) never downloads the checkpoint.
type StatusRecord struct {
	Version int        `json:"v"`
	Job     string     `json:"job"`
	Type    string     `json:"type"`
	State   jobs.State `json:"state"`
	// Phase is the job's stage when it has several ("map", "reduce"); empty otherwise.
	Phase string `json:"phase,omitempty"`
	// PhaseDone of PhaseTotal tasks of the phase are done (Done and Total count every task).
	PhaseDone  int `json:"phase_done,omitempty"`
	PhaseTotal int `json:"phase_total,omitempty"`
	Total      int `json:"total"`
	Done       int `json:"done"`
	Priority   int `json:"priority,omitempty"`
	// Epoch is the checkpoint's writer epoch; PlanEpoch the planner's.
	Epoch       uint64     `json:"epoch"`
	PlanEpoch   uint64     `json:"plan_epoch"`
	Seq         uint64     `json:"seq"`
	Duplicates  int64      `json:"duplicates,omitempty"`
	Error       string     `json:"error,omitempty"` // at most MaxStatusError bytes
	SubmittedAt time.Time  `json:"submitted_at"`
	StartedAt   time.Time  `json:"started_at"`
	UpdatedAt   time.Time  `json:"updated_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	// From the spec: the schedule and tick that made the job, the jobs it runs after, the job
	// it retries.
	Schedule string     `json:"schedule,omitempty"`
	Tick     *time.Time `json:"tick,omitempty"`
	After    []string   `json:"after,omitempty"`
	RetryOf  string     `json:"retry_of,omitempty"`
}

// NewStatusRecord makes the record of checkpoint cp of the job of spec (nil: not read).
func NewStatusRecord(cp *Checkpoint, spec *Spec) *StatusRecord {
	r := &StatusRecord{Version: StatusRecordVersion, Job: cp.Job, Type: cp.Type, State: cp.State,
		Total: cp.Total, Done: cp.DoneCount, Epoch: cp.WriterEpoch, PlanEpoch: cp.PlanEpoch, Seq: cp.Seq,
		Duplicates: cp.Duplicates, Error: clipBytes(cp.Error, MaxStatusError),
		StartedAt: cp.StartedAt, UpdatedAt: cp.UpdatedAt, FinishedAt: cp.FinishedAt,
		Phase: cp.Phase, PhaseDone: cp.PhaseDone, PhaseTotal: cp.PhaseTotal}
	if spec != nil {
		r.Priority, r.SubmittedAt = spec.Priority, spec.SubmittedAt
		r.Schedule, r.Tick, r.After, r.RetryOf = spec.Schedule, spec.Tick, spec.After, spec.RetryOf
		if r.Type == "" {
			r.Type = spec.Type
		}
	}
	return r
}

// Metadata returns the record as blob metadata: one key, its JSON in base64 (metadata values
// must be ASCII header values; an error may hold any text). An error that escapes to too many
// bytes is clipped further, so a record always encodes.
func (r *StatusRecord) Metadata() (map[string]string, error) {
	rec := *r
	for {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(&rec); err != nil {
			return nil, fmt.Errorf("encode status record: %w", err)
		}
		v := base64.RawURLEncoding.EncodeToString(bytes.TrimSpace(buf.Bytes()))
		if len(v) <= maxStatusValue {
			return map[string]string{StatusMetaKey: v}, nil
		}
		if rec.Error == "" {
			return nil, fmt.Errorf("encode status record: %d bytes, the limit is %d", len(v), maxStatusValue)
		}
		rec.Error = clipBytes(rec.Error, len(rec.Error)/2)
	}
}

// DecodeStatusRecord reads the record from a checkpoint blob's metadata (keys lower-cased).
// It returns ErrNoStatusRecord when there is none.
func DecodeStatusRecord(meta map[string]string) (*StatusRecord, error) {
	v, ok := meta[StatusMetaKey]
	if !ok {
		return nil, ErrNoStatusRecord
	}
	return DecodeStatusValue(v)
}

// DecodeStatusValue decodes one encoded record and checks it.
func DecodeStatusValue(v string) (*StatusRecord, error) {
	if len(v) > maxStatusValue {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadStatusRecord, len(v), maxStatusValue)
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadStatusRecord, err)
	}
	var r StatusRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadStatusRecord, err)
	}
	switch {
	case r.Version != StatusRecordVersion:
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrBadStatusRecord, r.Version, StatusRecordVersion)
	case CheckID(r.Job) != nil:
		return nil, fmt.Errorf("%w: job id %q", ErrBadStatusRecord, Clip(r.Job, 64))
	case r.Total < 0 || r.Total > jobs.MaxShards || r.Done < 0 || r.Done > r.Total:
		return nil, fmt.Errorf("%w: counts out of range (total %d, done %d)", ErrBadStatusRecord, r.Total, r.Done)
	case !isToken(string(r.State)):
		// Any lower-case word: a newer build may add states (it shows as it is).
		return nil, fmt.Errorf("%w: state %q", ErrBadStatusRecord, Clip(string(r.State), 32))
	case r.PhaseDone < 0 || r.PhaseTotal < 0 || r.PhaseDone > r.PhaseTotal:
		return nil, fmt.Errorf("%w: phase counts out of range (%d of %d)", ErrBadStatusRecord, r.PhaseDone, r.PhaseTotal)
	case r.Phase != "" && !isToken(r.Phase):
		return nil, fmt.Errorf("%w: phase %q", ErrBadStatusRecord, Clip(r.Phase, 32))
	case r.Priority < MinPriority || r.Priority > MaxPriority:
		return nil, fmt.Errorf("%w: priority %d", ErrBadStatusRecord, r.Priority)
	case len(r.Error) > MaxStatusError:
		return nil, fmt.Errorf("%w: error of %d bytes", ErrBadStatusRecord, len(r.Error))
	case r.Schedule != "" && CheckScheduleName(r.Schedule) != nil, r.RetryOf != "" && CheckID(r.RetryOf) != nil, len(r.After) > MaxAfter:
		return nil, fmt.Errorf("%w: schedule, retry_of or after malformed", ErrBadStatusRecord)
	}
	for _, a := range r.After {
		if CheckID(a) != nil {
			return nil, fmt.Errorf("%w: after: job id %q", ErrBadStatusRecord, Clip(a, 64))
		}
	}
	return &r, nil
}

// isToken: 1 to 32 of a-z and '_'.
func isToken(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 'a' || c > 'z') && c != '_' {
			return false
		}
	}
	return true
}

// clipBytes shortens s to at most n bytes, on a rune boundary, marking the cut.
func clipBytes(s string, n int) string {
	const mark = "…"
	if len(s) <= n {
		return s
	}
	if n < len(mark) {
		return ""
	}
	cut := n - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}
