package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"unicode"
	"unicode/utf8"
)

// The control requests a client sends to the running workers (core NATS request/reply, never
// stored): "validate these parameters of type T" on ValidateSubject(T), answered by one worker
// that has T, and "which types do you have" on TypesSubject(), answered by every worker.
//
// The decoders ignore unknown fields, so that a newer worker and an older client (or the other
// way round) still understand each other during a rolling upgrade. They refuse anything out of
// range, since a reply comes from whoever can publish on the subject.

// Limits of the control messages.
const (
	MaxControlParams  = 1 << 20 // bytes of parameters in a ValidateRequest (NATS' default max payload)
	MaxControlText    = 4096    // bytes of an error reason or field name in a ValidateReply
	MaxWorkerIDLen    = 256     // bytes of a worker id in a reply
	MaxTypesPerWorker = 1024    // job types in one TypesReply
	maxTypeNameLen    = 64      // as jobs.Registry allows
)

// ValidateRequest asks a worker to validate parameters of a job type it has.
type ValidateRequest struct {
	Type   string          `json:"type"`
	Params json.RawMessage `json:"params"`
}

// Encode returns the request's wire form.
func (m *ValidateRequest) Encode() ([]byte, error) { return json.Marshal(m) }

// DecodeValidateRequest parses a validate request.
func DecodeValidateRequest(data []byte) (*ValidateRequest, error) {
	var m ValidateRequest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: validate request: %v", ErrBadMessage, err)
	}
	if err := checkTypeName(m.Type); err != nil {
		return nil, fmt.Errorf("%w: validate request: %v", ErrBadMessage, err)
	}
	if len(m.Params) == 0 || len(m.Params) > MaxControlParams || !json.Valid(m.Params) {
		return nil, fmt.Errorf("%w: validate request %s: params missing, over %d bytes or not JSON", ErrBadMessage, m.Type, MaxControlParams)
	}
	return &m, nil
}

// Kinds of a ValidateError.
const (
	RefusedParams = "params" // the job refused its parameters (a *jobs.ParamError or another error)
	RefusedType   = "type"   // the answering worker does not have the type
)

// ValidateError is a refusal: the job's own error, field by field when it was a *jobs.ParamError.
type ValidateError struct {
	Kind   string `json:"kind"`            // RefusedParams or RefusedType
	Job    string `json:"job,omitempty"`   // *jobs.ParamError.Job
	Field  string `json:"field,omitempty"` // *jobs.ParamError.Field
	Reason string `json:"reason"`          // *jobs.ParamError.Reason, or the error's text
	Param  bool   `json:"param,omitempty"` // the error was a *jobs.ParamError
}

// ValidateReply answers a ValidateRequest: OK, or Error.
type ValidateReply struct {
	Worker string         `json:"worker"`
	OK     bool           `json:"ok,omitempty"`
	Error  *ValidateError `json:"error,omitempty"`
}

// Encode returns the reply's wire form.
func (m *ValidateReply) Encode() ([]byte, error) { return json.Marshal(m) }

// DecodeValidateReply parses a validate reply.
func DecodeValidateReply(data []byte) (*ValidateReply, error) {
	var m ValidateReply
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: validate reply: %v", ErrBadMessage, err)
	}
	if err := checkWorkerID(m.Worker); err != nil {
		return nil, fmt.Errorf("%w: validate reply: %v", ErrBadMessage, err)
	}
	if m.OK == (m.Error != nil) {
		return nil, fmt.Errorf("%w: validate reply from %s: want exactly one of ok and error", ErrBadMessage, m.Worker)
	}
	if e := m.Error; e != nil {
		if e.Kind != RefusedParams && e.Kind != RefusedType {
			return nil, fmt.Errorf("%w: validate reply from %s: unknown kind %q", ErrBadMessage, m.Worker, e.Kind)
		}
		if e.Reason == "" || len(e.Reason) > MaxControlText || len(e.Field) > MaxControlText || !utf8.ValidString(e.Reason+e.Field) {
			return nil, fmt.Errorf("%w: validate reply from %s: reason empty, over %d bytes or not UTF-8", ErrBadMessage, m.Worker, MaxControlText)
		}
		if e.Job != "" {
			if err := checkTypeName(e.Job); err != nil {
				return nil, fmt.Errorf("%w: validate reply from %s: %v", ErrBadMessage, m.Worker, err)
			}
		}
	}
	return &m, nil
}

// TypesReply answers a types request: a worker's id and the job types it has, sorted.
type TypesReply struct {
	Worker string   `json:"worker"`
	Types  []string `json:"types"`
	// Programs are the types that run a program registered on the worker (--program).
	Programs []string `json:"programs,omitempty"`
}

// Encode returns the reply's wire form.
func (m *TypesReply) Encode() ([]byte, error) { return json.Marshal(m) }

// DecodeTypesReply parses a types reply.
func DecodeTypesReply(data []byte) (*TypesReply, error) {
	var m TypesReply
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: types reply: %v", ErrBadMessage, err)
	}
	if err := checkWorkerID(m.Worker); err != nil {
		return nil, fmt.Errorf("%w: types reply: %v", ErrBadMessage, err)
	}
	if len(m.Types) > MaxTypesPerWorker {
		return nil, fmt.Errorf("%w: types reply from %s: %d types, at most %d", ErrBadMessage, m.Worker, len(m.Types), MaxTypesPerWorker)
	}
	for _, t := range m.Types {
		if err := checkTypeName(t); err != nil {
			return nil, fmt.Errorf("%w: types reply from %s: %v", ErrBadMessage, m.Worker, err)
		}
	}
	for _, t := range m.Programs {
		if !slices.Contains(m.Types, t) {
			return nil, fmt.Errorf("%w: types reply from %s: program %q is not one of its types", ErrBadMessage, m.Worker, t)
		}
	}
	return &m, nil
}

// checkTypeName accepts what jobs.Registry accepts: 1 to 64 bytes of letters, digits, '-', '_', '.'.
func checkTypeName(typ string) error {
	if typ == "" || len(typ) > maxTypeNameLen || !utf8.ValidString(typ) {
		return fmt.Errorf("job type %q: empty, over %d bytes or not UTF-8", typ, maxTypeNameLen)
	}
	for _, c := range typ {
		if !unicode.IsLetter(c) && !unicode.IsDigit(c) && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("job type %q: only letters, digits, '-', '_' and '.' are allowed", typ)
		}
	}
	return nil
}

// checkWorkerID accepts 1 to 256 bytes of printable ASCII.
func checkWorkerID(id string) error {
	if id == "" || len(id) > MaxWorkerIDLen {
		return fmt.Errorf("worker id %q: empty or over %d bytes", id, MaxWorkerIDLen)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return fmt.Errorf("worker id %q: only printable ASCII is allowed", id)
		}
	}
	return nil
}
