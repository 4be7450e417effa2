package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// Keyable is a Job that runs as a keyed job, always (RegisterKeyed) or when its parameters ask
// for it (the built-in wordcount with "output":"blob"). The cluster asks RunsKeyed once, when the
// job is planned; workers run a keyed job's tasks with Keyed. The job's kind travels with its
// shards, so an aggregate job's shards may hold any bytes.
type Keyable interface {
	Job
	// Keyed returns the keyed form of the job.
	Keyed() KeyedJob
	// RunsKeyed reports whether a job with these (validated) parameters runs keyed.
	RunsKeyed(params json.RawMessage) bool
}

// KeyedOf returns the keyed form of j for these parameters, or nil when j runs as an aggregate
// job.
func KeyedOf(j Job, params json.RawMessage) KeyedJob {
	if k, ok := j.(Keyable); ok && k.RunsKeyed(params) {
		return k.Keyed()
	}
	return nil
}

// KeyedForm returns the keyed form of j if it has one (whatever the parameters), else nil.
func KeyedForm(j Job) KeyedJob {
	if k, ok := j.(Keyable); ok {
		return k.Keyed()
	}
	return nil
}

// RegisterKeyed adds a keyed job under k.Type(), with the rules of Register.
func (r *Registry) RegisterKeyed(k KeyedJob) error {
	if k == nil {
		return errors.New("register keyed job: nil job")
	}
	return r.Register(keyedOnly{k})
}

// RegisterKeyed adds k to the default registry.
func RegisterKeyed(k KeyedJob) error { return Default().RegisterKeyed(k) }

// errKeyedOnly: a keyed job has no aggregate; the cluster never calls these for it.
var errKeyedOnly = errors.New("a keyed job has no aggregate: it runs as map and reduce tasks")

// keyedOnly is a KeyedJob as a Job of the registry: always keyed.
type keyedOnly struct{ k KeyedJob }

func (o keyedOnly) Type() string                          { return o.k.Type() }
func (o keyedOnly) Validate(params json.RawMessage) error { return o.k.Validate(params) }
func (o keyedOnly) Keyed() KeyedJob                       { return o.k }
func (o keyedOnly) RunsKeyed(json.RawMessage) bool        { return true }

func (o keyedOnly) Split(ctx context.Context, env Env, params json.RawMessage) ([][]byte, error) {
	return o.k.Split(ctx, env, params)
}

func (o keyedOnly) Map(context.Context, Env, Task) ([]byte, error) {
	return nil, fmt.Errorf("%s: %w", o.k.Type(), errKeyedOnly)
}

func (o keyedOnly) NewAggregate(json.RawMessage) (Aggregate, error) {
	return nil, fmt.Errorf("%s: %w", o.k.Type(), errKeyedOnly)
}
