package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// MaxMessage is the largest announcement or event accepted.
const MaxMessage = 64 << 10

// Version of the message formats below.
const Version = 1

// Announcement is what a worker says about itself on every announce interval.
type Announcement struct {
	V        int      `json:"v"`
	ID       string   `json:"id"`
	Version  string   `json:"version"`
	JobTypes []string `json:"job_types"`
	// Programs are the job types that run a program registered on the worker (--program).
	Programs    []string  `json:"programs,omitempty"`
	Concurrency int       `json:"concurrency"`
	InFlight    int       `json:"in_flight"`
	StartedAt   time.Time `json:"started_at"`
	Leader      bool      `json:"leader"`
	Epoch       uint64    `json:"epoch,omitempty"` // the term this worker leads, when Leader
	HTTPAddr    string    `json:"http_addr,omitempty"`
	Host        string    `json:"host,omitempty"` // the machine's host name
	PID         int       `json:"pid,omitempty"`
	// Problems are the worker's failing readiness checks ("results: stream full"), at most
	// MaxProblems of at most MaxProblemLen bytes each; none when it is ready.
	Problems []string  `json:"problems,omitempty"`
	SentAt   time.Time `json:"sent_at"`
}

// Bounds of an announcement's problems.
const (
	MaxProblems   = 8
	MaxProblemLen = 300
)

// Encode returns the announcement's wire form.
func (a *Announcement) Encode() ([]byte, error) {
	a.V = Version
	if err := a.check(); err != nil {
		return nil, err
	}
	return json.Marshal(a)
}

func (a *Announcement) check() error {
	var errs []error
	if a.V != Version {
		errs = append(errs, fmt.Errorf("version %d: this build reads version %d", a.V, Version))
	}
	if a.ID == "" || len(a.ID) > 256 {
		errs = append(errs, fmt.Errorf("worker id %q: must be 1 to 256 bytes", a.ID))
	}
	if len(a.Host) > 256 || len(a.HTTPAddr) > 300 || a.PID < 0 {
		errs = append(errs, fmt.Errorf("host %d bytes, http_addr %d bytes, pid %d: at most 256 and 300 bytes, pid not negative", len(a.Host), len(a.HTTPAddr), a.PID))
	}
	if a.Concurrency < 0 || a.InFlight < 0 {
		errs = append(errs, fmt.Errorf("concurrency %d, in flight %d: must not be negative", a.Concurrency, a.InFlight))
	}
	if a.Leader && a.Epoch == 0 {
		errs = append(errs, errors.New("a leader's announcement needs its epoch"))
	}
	if len(a.Problems) > MaxProblems {
		errs = append(errs, fmt.Errorf("%d problems: at most %d", len(a.Problems), MaxProblems))
	}
	for _, p := range a.Problems {
		if p == "" || len(p) > MaxProblemLen {
			errs = append(errs, fmt.Errorf("a problem of %d bytes: must be 1 to %d", len(p), MaxProblemLen))
			break
		}
	}
	return errors.Join(errs...)
}

// DecodeAnnouncement parses and checks an announcement.
func DecodeAnnouncement(data []byte) (*Announcement, error) {
	if len(data) > MaxMessage {
		return nil, fmt.Errorf("membership: announcement of %d bytes exceeds %d", len(data), MaxMessage)
	}
	var a Announcement
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("membership: decode announcement: %w", err)
	}
	if err := a.check(); err != nil {
		return nil, fmt.Errorf("membership: announcement: %w", err)
	}
	return &a, nil
}

// Event is one election or coordinator event of one worker (Kind is an election.EventKind or a
// coordinator.EventKind value, e.g. "elected", "first_merge").
type Event struct {
	V      int       `json:"v"`
	Seq    uint64    `json:"seq"` // per worker process, from 1
	At     time.Time `json:"at"`
	Worker string    `json:"worker"`
	Kind   string    `json:"kind"`
	Epoch  uint64    `json:"epoch,omitempty"`
	Job    string    `json:"job,omitempty"`
	Shard  int       `json:"shard,omitempty"`
	State  string    `json:"state,omitempty"`
	Count  int       `json:"count,omitempty"`
	Err    string    `json:"err,omitempty"`
}

func (e *Event) check() error {
	var errs []error
	if e.V != Version {
		errs = append(errs, fmt.Errorf("version %d: this build reads version %d", e.V, Version))
	}
	if e.Worker == "" || len(e.Worker) > 256 {
		errs = append(errs, fmt.Errorf("worker id %q: must be 1 to 256 bytes", e.Worker))
	}
	if e.Kind == "" || len(e.Kind) > 64 {
		errs = append(errs, fmt.Errorf("kind %q: must be 1 to 64 bytes", e.Kind))
	}
	if e.At.IsZero() {
		errs = append(errs, errors.New("no time"))
	}
	return errors.Join(errs...)
}

// Encode returns the event's wire form.
func (e *Event) Encode() ([]byte, error) {
	e.V = Version
	if err := e.check(); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// DecodeEvent parses and checks an event.
func DecodeEvent(data []byte) (*Event, error) {
	if len(data) > MaxMessage {
		return nil, fmt.Errorf("membership: event of %d bytes exceeds %d", len(data), MaxMessage)
	}
	var e Event
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("membership: decode event: %w", err)
	}
	if err := e.check(); err != nil {
		return nil, fmt.Errorf("membership: event: %w", err)
	}
	return &e, nil
}
