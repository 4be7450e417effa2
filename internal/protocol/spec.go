package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mapagg/mapagg/jobs"
)

// Spec is a submitted job: what `worker submit` writes to <job-id>/spec.json.
type Spec struct {
	ID          string          `json:"id"`
	Type        string          `json:"type"`
	Params      json.RawMessage `json:"params"`
	SubmittedAt time.Time       `json:"submitted_at"`
	// After: the job starts once every one of these jobs succeeded (it fails if one does not).
	After []string `json:"after,omitempty"`
	// Retries: a failed job is submitted again, with backoff, up to this many times.
	Retries int `json:"retries,omitempty"`
	// RetryOf names the job this one retries (and the spec it copies).
	RetryOf string `json:"retry_of,omitempty"`
	// Schedule and Tick name the schedule and tick that made the job.
	Schedule string     `json:"schedule,omitempty"`
	Tick     *time.Time `json:"tick,omitempty"`
	// Priority weighs the job's share of dispatch against running jobs of its type: each step
	// up doubles it (MinPriority to MaxPriority; 0, the default, is left out of the JSON, so
	// earlier builds read such specs).
	Priority int `json:"priority,omitempty"`
	// OutputFormat is how a keyed job stores its output blobs: "tsv", "jsonl", "tsv.zst" or
	// "jsonl.zst" (jobs.OutputFormats); "", the default, is TSV for a job whose keys are text
	// and JSON lines otherwise. An aggregate job has no output blobs and refuses it.
	OutputFormat string `json:"output_format,omitempty"`
}

// Limits of a spec's dependency and retry fields.
const (
	MaxAfter   = 32
	MaxRetries = 10
)

// Priorities a job may have.
const (
	MinPriority = -10
	MaxPriority = 10
)

// PriorityWeight is a job's share weight: 2^priority.
func PriorityWeight(p int) float64 {
	p = min(max(p, MinPriority), MaxPriority)
	if p >= 0 {
		return float64(uint(1) << p)
	}
	return 1 / float64(uint(1)<<-p)
}

// ErrBadSpec is matched by every error ParseSpec returns.
var ErrBadSpec = errors.New("bad job spec")

// ErrBadID is matched by errors about a malformed job id.
var ErrBadID = errors.New("bad job id")

// NewID returns a fresh job id: UTC time to the second (so ids sort by submission) and 8 random
// hex digits, e.g. "20261121-005210-3f9a0c1d".
func NewID(now time.Time) string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// CheckID reports whether id can name a job: 1–64 characters of a-z, 0-9 and '-', starting with a
// letter or digit. Ids become blob prefixes and NATS subject tokens, so nothing else is allowed.
func CheckID(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("%w %q: must be 1 to 64 characters", ErrBadID, Clip(id, 64))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0
		if !ok {
			return fmt.Errorf("%w %q: only a-z, 0-9 and '-' (not first) are allowed", ErrBadID, Clip(id, 64))
		}
	}
	return nil
}

// Encode returns the spec's JSON, refusing one over jobs.MaxSpecBytes.
func (s *Spec) Encode() ([]byte, error) {
	if err := s.checkShape(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if len(b) > jobs.MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes encoded, the limit is %d", ErrBadSpec, len(b), jobs.MaxSpecBytes)
	}
	return b, nil
}

// ParseSpec decodes a spec read from storage and checks its shape (not its parameters: that is the
// job type's Validate).
func ParseSpec(data []byte) (*Spec, error) {
	if len(data) > jobs.MaxSpecBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrBadSpec, len(data), jobs.MaxSpecBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Spec
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadSpec, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("%w: trailing data after the JSON object", ErrBadSpec)
	}
	if err := s.checkShape(); err != nil {
		return nil, err
	}
	return &s, nil
}

// FieldError is a spec field that breaks its rule; it matches ErrBadSpec. The CLI and the HTTP
// API show its message as it is: each rule has one message, written here.
type FieldError struct {
	Field  string // the spec's JSON name: "type", "params", "priority", "after", "retries", ...
	Reason string // what is wrong and what is allowed, after the field's name
}

func (e *FieldError) Error() string { return fmt.Sprintf("%v: %s %s", ErrBadSpec, e.Field, e.Reason) }

// Unwrap makes a FieldError match ErrBadSpec.
func (e *FieldError) Unwrap() error { return ErrBadSpec }

// Is makes an error in the params match jobs.ErrBadParams too.
func (e *FieldError) Is(target error) bool { return e.Field == "params" && target == jobs.ErrBadParams }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// checkShape checks every field's rule; it is the one place these rules and their messages live.
func (s *Spec) checkShape() error {
	if err := CheckID(s.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	if s.Type == "" {
		return fieldErr("type", "is required: a job type the cluster runs (`worker types` lists them)")
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return fieldErr("priority", "%d is out of range: use %d to %d (each step up doubles the job's share of the workers against running jobs of its type; default 0)",
			s.Priority, MinPriority, MaxPriority)
	}
	if len(s.Params) == 0 || !json.Valid(s.Params) {
		return fieldErr("params", "of %s are not valid JSON: give a JSON object, e.g. {\"shards\": 4}", Clip(s.Type, 64))
	}
	if len(s.After) > MaxAfter {
		return fieldErr("after", "names %d jobs: the limit is %d", len(s.After), MaxAfter)
	}
	seen := make(map[string]bool, len(s.After))
	for _, a := range s.After {
		if err := CheckID(a); err != nil {
			return fieldErr("after", "%v", err)
		}
		if a == s.ID {
			return fieldErr("after", "names job %s itself: a job cannot run after itself", s.ID)
		}
		if seen[a] {
			return fieldErr("after", "names job %s twice", a)
		}
		seen[a] = true
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		return fieldErr("retries", "%d is out of range: use 0 to %d", s.Retries, MaxRetries)
	}
	if s.RetryOf != "" {
		if err := CheckID(s.RetryOf); err != nil {
			return fieldErr("retry_of", "%v", err)
		}
	}
	if s.Schedule != "" {
		if err := CheckScheduleName(s.Schedule); err != nil {
			return fieldErr("schedule", "%v", err)
		}
	}
	if err := CheckOutputFormat(s.OutputFormat); err != nil {
		return err
	}
	return nil
}

// CheckOutputFormat refuses an output format a keyed job cannot store ("" is the default).
func CheckOutputFormat(f string) error {
	if f != "" && !slices.Contains(jobs.OutputFormats(), f) {
		return fieldErr("output_format", "%q is not a format: use %s, or leave it out (TSV for a job whose keys are text, JSON lines otherwise)",
			Clip(f, 32), strings.Join(jobs.OutputFormats(), ", "))
	}
	return nil
}
