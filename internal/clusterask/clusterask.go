// Package clusterask asks the running workers over NATS: to validate a job type this program
// lacks (one worker that has the type runs its Validate), and for every worker's types.
//
// Not guaranteed: a types answer lists the workers that answered within the window; a worker
// that is slow to answer is left out.
package clusterask

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mapagg/mapagg/internal/protocol"
	"github.com/mapagg/mapagg/jobs"
)

// ErrNoWorkers is returned when the running cluster's answer is needed (a type this program
// lacks, the cluster's types) and no worker answers on NATS.
var ErrNoWorkers = errors.New("no worker is running")

// Validator validates the job types this program lacks by asking the running workers
// over NATS: one worker that has the type runs its Validate (client.Validator).
type Validator struct {
	// Conn is the NATS connection; nil when NATS is unreachable (ConnErr says why).
	Conn    *nats.Conn
	ConnErr error
	// URL names the NATS server in messages.
	URL string
	// Prefix is the stream and subject prefix. Default "mapagg".
	Prefix string
	// Local lists this program's own types, for messages.
	Local []string
	// Timeout bounds a validate request. Default 10s.
	Timeout time.Duration
	// Window is how long a types request collects answers. Default 500ms.
	Window time.Duration
}

func (v *Validator) names() protocol.Names {
	return protocol.NewNames(cmp.Or(v.Prefix, "mapagg"))
}

// ValidateJob checks a job type and its parameters with a running worker that has the type.
func (v *Validator) ValidateJob(ctx context.Context, typ string, params json.RawMessage) error {
	if v.Conn == nil {
		return fmt.Errorf("this program does not have job type %q (it has: %s), and NATS at %s, which would ask the running workers, is unreachable: %w",
			typ, joinOrNone(v.Local), v.URL, cmp.Or(v.ConnErr, errors.New("no connection")))
	}
	req := protocol.ValidateRequest{Type: typ, Params: params}
	data, err := req.Encode()
	if err != nil {
		return err
	}
	if len(data) > protocol.MaxControlParams {
		return fmt.Errorf("%w: params of %s are %d bytes, over %d", jobs.ErrBadParams, typ, len(params), protocol.MaxControlParams)
	}
	rctx, cancel := context.WithTimeout(ctx, cmp.Or(v.Timeout, 10*time.Second))
	defer cancel()
	m, err := v.Conn.RequestWithContext(rctx, v.names().ValidateSubject(typ), data)
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

// unknown is the error for a type no live worker has: the types the live workers know, or
// ErrNoWorkers when none answers.
func (v *Validator) unknown(ctx context.Context, typ string) error {
	workers, err := v.Types(ctx)
	if err != nil {
		return err
	}
	if len(workers) == 0 {
		return NoWorkersError(v.URL, cmp.Or(v.Prefix, "mapagg"))
	}
	return &jobs.UnknownTypeError{Type: typ, Known: KnownTypes(workers)}
}

// Types asks every running worker for its job types (answers within Window, by worker id).
func (v *Validator) Types(ctx context.Context) ([]WorkerTypes, error) {
	if v.Conn == nil {
		return nil, fmt.Errorf("NATS at %s is unreachable: %w", v.URL, cmp.Or(v.ConnErr, errors.New("no connection")))
	}
	return clusterTypes(ctx, v.Conn, v.names(), cmp.Or(v.Window, 500*time.Millisecond))
}

// NoWorkersError is ErrNoWorkers with where it looked and what to check.
func NoWorkersError(url, prefix string) error {
	return fmt.Errorf("%w on NATS at %s (stream prefix %q): start one with `worker run`, or check --nats-url and --stream-prefix",
		ErrNoWorkers, url, prefix)
}

// WorkerTypes is one running worker's job types.
type WorkerTypes struct {
	Worker string   `json:"worker"`
	Types  []string `json:"types"`
	// Programs are the types that run a program registered on the worker (worker run --program).
	Programs []string `json:"programs,omitempty"`
}

// clusterTypes collects the answers to one types request that arrive within window. An answer
// that does not decode is dropped.
func clusterTypes(ctx context.Context, nc *nats.Conn, names protocol.Names, window time.Duration) ([]WorkerTypes, error) {
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
	var out []WorkerTypes
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
		out = append(out, WorkerTypes{Worker: rep.Worker, Types: rep.Types, Programs: rep.Programs})
	}
	slices.SortFunc(out, func(a, b WorkerTypes) int { return strings.Compare(a.Worker, b.Worker) })
	return out, nil
}

// KnownTypes is every type some worker has, sorted.
func KnownTypes(workers []WorkerTypes) []string {
	var out []string
	for _, w := range workers {
		out = append(out, w.Types...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
