package node

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// validateQueue is the queue group of the validate responders: one worker that has the type answers.
const validateQueue = "validate"

// responder answers the cluster's control requests for one running worker: validate requests for
// each job type it has (queue group, one answer per request) and types requests (every worker
// answers). Its handlers run on the NATS connection's goroutine; stop unsubscribes them.
type responder struct {
	id    string
	reg   *jobs.Registry
	progs []string // the types that are programs
	log   *slog.Logger
	subs  []*nats.Subscription
}

func startResponder(nc *nats.Conn, prefix, id string, reg *jobs.Registry, progs []string, log *slog.Logger) (*responder, error) {
	r := &responder{id: id, reg: reg, progs: progs, log: log}
	names := protocol.NewNames(prefix)
	for _, typ := range reg.Types() {
		sub, err := nc.QueueSubscribe(names.ValidateSubject(typ), validateQueue, r.onValidate)
		if err != nil {
			r.stop()
			return nil, fmt.Errorf("subscribe validate %s: %w", typ, err)
		}
		r.subs = append(r.subs, sub)
	}
	sub, err := nc.Subscribe(names.TypesSubject(), r.onTypes)
	if err != nil {
		r.stop()
		return nil, fmt.Errorf("subscribe types: %w", err)
	}
	r.subs = append(r.subs, sub)
	// The requests must reach this worker from now on, not after the next ping.
	if err := nc.Flush(); err != nil {
		r.stop()
		return nil, fmt.Errorf("subscribe control: %w", err)
	}
	return r, nil
}

func (r *responder) stop() {
	for _, s := range r.subs {
		_ = s.Unsubscribe()
	}
}

func (r *responder) reply(m *nats.Msg, v interface{ Encode() ([]byte, error) }) {
	data, err := v.Encode()
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		r.log.Warn("answer control request", "subject", m.Subject, "err", err)
	}
}

func (r *responder) onTypes(m *nats.Msg) {
	r.reply(m, &protocol.TypesReply{Worker: r.id, Types: r.reg.Types(), Programs: r.progs})
}

func (r *responder) onValidate(m *nats.Msg) {
	e := r.validate(m.Data)
	r.reply(m, &protocol.ValidateReply{Worker: r.id, OK: e == nil, Error: e})
}

// validate runs the job's own Validate on the request's parameters; nil means valid.
func (r *responder) validate(data []byte) (verr *protocol.ValidateError) {
	req, err := protocol.DecodeValidateRequest(data)
	if err != nil {
		return &protocol.ValidateError{Kind: protocol.RefusedParams, Reason: clip(err.Error())}
	}
	job, err := r.reg.Lookup(req.Type)
	if err != nil {
		return &protocol.ValidateError{Kind: protocol.RefusedType, Reason: clip(err.Error())}
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("job Validate panicked", "type", req.Type, "panic", p)
			verr = &protocol.ValidateError{Kind: protocol.RefusedParams, Job: req.Type, Reason: clip(fmt.Sprintf("validate %s panicked: %v", req.Type, p))}
		}
	}()
	if err := job.Validate(req.Params); err != nil {
		var pe *jobs.ParamError
		if errors.As(err, &pe) {
			return &protocol.ValidateError{Kind: protocol.RefusedParams, Param: true, Job: req.Type, Field: clip(pe.Field), Reason: clip(pe.Reason)}
		}
		return &protocol.ValidateError{Kind: protocol.RefusedParams, Job: req.Type, Reason: clip(err.Error())}
	}
	return nil
}

func clip(s string) string {
	if len(s) > protocol.MaxControlText {
		s = strings.ToValidUTF8(s[:protocol.MaxControlText-3], "") + "..."
	}
	if s == "" {
		return "(no reason given)"
	}
	return s
}

// ControlConfig bounds the control requests of a client of the cluster.
type ControlConfig struct {
	// Timeout bounds a validate request once a worker is known to have the type. Default 10s.
	Timeout time.Duration
	// Window is how long a types request collects answers from the running workers. Default 500ms.
	Window time.Duration
}

// DefaultControlConfig returns the default bounds.
func DefaultControlConfig() ControlConfig {
	return ControlConfig{Timeout: 10 * time.Second, Window: 500 * time.Millisecond}
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
