package protocol

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/mapagg/mapagg/jobs"
	"time"
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

func (s *Spec) checkShape() error {
	if err := CheckID(s.ID); err != nil {
		return fmt.Errorf("%w: %w", ErrBadSpec, err)
	}
	if s.Type == "" {
		return fmt.Errorf("%w: no job type", ErrBadSpec)
	}
	if s.Priority < MinPriority || s.Priority > MaxPriority {
		return fmt.Errorf("%w: priority %d: use %d to %d (higher runs sooner)", ErrBadSpec, s.Priority, MinPriority, MaxPriority)
	}
	if len(s.Params) == 0 || !json.Valid(s.Params) {
		return fmt.Errorf("%w: params must be a JSON value", ErrBadSpec)
	}
	if len(s.After) > MaxAfter {
		return fmt.Errorf("%w: after names %d jobs, the limit is %d", ErrBadSpec, len(s.After), MaxAfter)
	}
	for _, a := range s.After {
		if err := CheckID(a); err != nil {
			return fmt.Errorf("%w: after: %w", ErrBadSpec, err)
		}
		if a == s.ID {
			return fmt.Errorf("%w: job %s cannot run after itself", ErrBadSpec, s.ID)
		}
	}
	if s.Retries < 0 || s.Retries > MaxRetries {
		return fmt.Errorf("%w: retries %d: use 0 to %d", ErrBadSpec, s.Retries, MaxRetries)
	}
	if s.RetryOf != "" {
		if err := CheckID(s.RetryOf); err != nil {
			return fmt.Errorf("%w: retry_of: %w", ErrBadSpec, err)
		}
	}
	if s.Schedule != "" {
		if err := CheckScheduleName(s.Schedule); err != nil {
			return fmt.Errorf("%w: %w", ErrBadSpec, err)
		}
	}
	return nil
}
