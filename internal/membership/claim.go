package membership

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrDuplicateID: another live process already uses this worker id.
var ErrDuplicateID = errors.New("worker id already in use")

// DuplicateIDError names the id and what the live holder said about itself.
type DuplicateIDError struct {
	ID        string
	StartedAt time.Time // when the holder started
	HTTPAddr  string    // where it serves, if it said
}

func (e *DuplicateIDError) Error() string {
	where := ""
	if e.HTTPAddr != "" {
		where = ", serving at " + e.HTTPAddr
	}
	return fmt.Sprintf("%v: worker id %q is used by a live process (started %s%s); give every worker its own id (--id or WORKER_ID; default hostname-pid)",
		ErrDuplicateID, e.ID, e.StartedAt.UTC().Format(time.RFC3339), where)
}

func (e *DuplicateIDError) Unwrap() error { return ErrDuplicateID }

// Holder is what a process that holds an id answers.
type Holder struct {
	ID        string    `json:"id"`
	Instance  string    `json:"instance"` // random per process
	StartedAt time.Time `json:"started_at"`
	HTTPAddr  string    `json:"http_addr,omitempty"`
}

// IDSubject is the subject on which the holder of id answers: prefix + ".ctl.id." + a hash of id
// (an id may hold characters a subject may not).
func IDSubject(prefix, id string) string {
	h := sha256.Sum256([]byte(id))
	return prefix + ".ctl.id." + hex.EncodeToString(h[:12])
}

// Claim asks whether a live process answers for self.ID within wait; if one does (another
// instance), it returns a *DuplicateIDError. Otherwise it answers for the id from now on until
// release is called. Two processes that claim the same id within the same moment may both win:
// the check is for the common mistake, a second process started later with the same id.
func Claim(nc *nats.Conn, prefix string, self Holder, wait time.Duration) (release func(), err error) {
	subject := IDSubject(prefix, self.ID)
	m, err := nc.Request(subject, nil, wait)
	switch {
	case err == nil:
		if h, err := DecodeHolder(m.Data); err == nil && h.Instance != self.Instance && h.ID == self.ID {
			return nil, &DuplicateIDError{ID: self.ID, StartedAt: h.StartedAt, HTTPAddr: protocolClip(h.HTTPAddr)}
		}
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
	default:
		return nil, fmt.Errorf("check worker id %q: %w", self.ID, err)
	}
	data, err := json.Marshal(self)
	if err != nil {
		return nil, err
	}
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) { _ = m.Respond(data) })
	if err != nil {
		return nil, fmt.Errorf("answer for worker id %q: %w", self.ID, err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("answer for worker id %q: %w", self.ID, err)
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// DecodeHolder parses a holder's answer and refuses what a worker could not have sent.
func DecodeHolder(data []byte) (*Holder, error) {
	if len(data) > MaxMessage {
		return nil, fmt.Errorf("membership: id holder answer of %d bytes exceeds %d", len(data), MaxMessage)
	}
	var h Holder
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("membership: decode id holder: %w", err)
	}
	if h.ID == "" || len(h.ID) > 256 || h.Instance == "" || len(h.Instance) > 64 {
		return nil, errors.New("membership: id holder: id of 1 to 256 bytes and instance of 1 to 64 required")
	}
	return &h, nil
}

// protocolClip keeps an address from outside short in an error.
func protocolClip(s string) string {
	if len(s) > 128 {
		return s[:128] + "..."
	}
	return s
}
