package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/client"
	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// validateQueue is the queue group of the validate responders: one worker that has the type answers.
const validateQueue = "validate"

// responder answers the cluster's control requests for one running worker: validate requests for
// each job type it has (queue group, one answer per request) and types requests (every worker
// answers). Its handlers run on the NATS connection's goroutine; stop unsubscribes them.
type responder struct {
	id   string
	reg  *jobs.Registry
	log  *slog.Logger
	subs []*nats.Subscription
}

func startResponder(nc *nats.Conn, prefix, id string, reg *jobs.Registry, log *slog.Logger) (*responder, error) {
	r := &responder{id: id, reg: reg, log: log}
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
	r.reply(m, &protocol.TypesReply{Worker: r.id, Types: r.reg.Types()})
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

// clusterValidator asks the running workers to validate a job type this binary does not have.
type clusterValidator struct {
	nc      *nats.Conn // nil when connErr
	connErr error
	url     string
	names   protocol.Names
	local   []string // the types this binary has, for messages
	cfg     ControlConfig
}

var _ client.Validator = (*clusterValidator)(nil)

// ValidateJob implements client.Validator over NATS.
func (v *clusterValidator) ValidateJob(ctx context.Context, typ string, params json.RawMessage) error {
	if v.nc == nil {
		return fmt.Errorf("this binary does not have job type %q (it has: %s), and NATS at %s, which would ask the running workers, is unreachable: %w",
			typ, joinOrNone(v.local), v.url, v.connErr)
	}
	req := protocol.ValidateRequest{Type: typ, Params: params}
	data, err := req.Encode()
	if err != nil {
		return err
	}
	if len(data) > protocol.MaxControlParams {
		return fmt.Errorf("%w: params of %s are %d bytes, over %d", jobs.ErrBadParams, typ, len(params), protocol.MaxControlParams)
	}
	rctx, cancel := context.WithTimeout(ctx, v.cfg.Timeout)
	defer cancel()
	m, err := v.nc.RequestWithContext(rctx, v.names.ValidateSubject(typ), data)
	if errors.Is(err, nats.ErrNoResponders) {
		return v.unknown(ctx, typ)
	}
	if err != nil {
		return fmt.Errorf("ask the cluster to validate %s: %w", typ, err)
	}
	rep, err := protocol.DecodeValidateReply(m.Data)
	if err != nil {
		return fmt.Errorf("ask the cluster to validate %s: %w", typ, err)
	}
	switch e := rep.Error; {
	case e == nil:
		return nil
	case e.Kind == protocol.RefusedType:
		return v.unknown(ctx, typ)
	case e.Param:
		return &jobs.ParamError{Job: e.Job, Field: e.Field, Reason: e.Reason}
	default:
		return fmt.Errorf("%w: %s (worker %s)", jobs.ErrBadParams, e.Reason, rep.Worker)
	}
}

// checkLocal asks the running workers about a type this binary has: one of them must have it
// too, and accept the parameters (its build may differ from this one).
func (v *clusterValidator) checkLocal(ctx context.Context, typ string, params json.RawMessage) error {
	if v.nc == nil {
		return fmt.Errorf("cannot check that a running worker has job type %q: NATS at %s is unreachable: %w", typ, v.url, v.connErr)
	}
	return v.ValidateJob(ctx, typ, params)
}

// unknown is the error for a type no live worker has: the types the live workers know, or
// ErrNoWorkers when none answers.
func (v *clusterValidator) unknown(ctx context.Context, typ string) error {
	workers, err := gatherTypes(ctx, v.nc, v.names, v.cfg.Window)
	if err != nil {
		return err
	}
	if len(workers) == 0 {
		return noWorkers(v.url, v.names)
	}
	return &jobs.UnknownTypeError{Type: typ, Known: unionTypes(workers)}
}

func noWorkers(url string, names protocol.Names) error {
	return fmt.Errorf("%w on NATS at %s (stream prefix %q): start one with `worker run`, or check --nats-url and --stream-prefix",
		ErrNoWorkers, url, names.Prefix)
}

// gatherTypes asks every running worker for its job types and collects the answers that arrive
// within window, sorted by worker id. An answer that does not decode is dropped.
func gatherTypes(ctx context.Context, nc *nats.Conn, names protocol.Names, window time.Duration) ([]protocol.TypesReply, error) {
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("ask the cluster for its types: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.PublishRequest(names.TypesSubject(), inbox, nil); err != nil {
		return nil, fmt.Errorf("ask the cluster for its types: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, window)
	defer cancel()
	seen := map[string]bool{}
	var out []protocol.TypesReply
	for {
		m, err := sub.NextMsgWithContext(wctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break // the window is over
		}
		rep, err := protocol.DecodeTypesReply(m.Data)
		if err != nil || seen[rep.Worker] {
			continue
		}
		seen[rep.Worker] = true
		out = append(out, *rep)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Worker < out[j].Worker })
	return out, nil
}

// unionTypes is every type some worker has, sorted.
func unionTypes(workers []protocol.TypesReply) []string {
	set := map[string]bool{}
	for _, w := range workers {
		for _, t := range w.Types {
			set[t] = true
		}
	}
	out := make([]string, 0, len(set))
	for t := range set {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
