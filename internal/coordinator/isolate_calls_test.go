package coordinator

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mapagg/mapagg/builtin"
	"github.com/mapagg/mapagg/internal/worker"
	"github.com/mapagg/mapagg/jobs"
)

// Job types whose code panics in one leader-side call each (beyond those of package badjobs).

type nParams struct {
	N int `json:"n"`
}

type sumJob struct{}

func (sumJob) Split(_ context.Context, _ jobs.Env, p nParams) ([]int, error) {
	out := make([]int, p.N)
	for i := range out {
		out[i] = i
	}
	return out, nil
}
func (sumJob) Map(_ context.Context, _ jobs.Env, s int) (int64, error) { return int64(s), nil }
func (sumJob) Merge(a, b int64) int64                                  { return a + b }

type panicIdentity struct{ sumJob }

func (panicIdentity) Identity(nParams) int64 { panic("identity") }

type panicCount struct{ sumJob }

func (panicCount) Count(nParams) (int, error)          { panic("count") }
func (panicCount) Shard(_ nParams, i int) (int, error) { return i, nil }

type panicShard struct{ sumJob }

func (panicShard) Count(p nParams) (int, error) { return p.N, nil }
func (panicShard) Shard(_ nParams, i int) (int, error) {
	if i == 2 {
		panic("shard 2")
	}
	return i, nil
}

type panicParams struct {
	N int `json:"n"`
}

func (panicParams) Validate() error { panic("validate") }

type panicValidate struct{}

func (panicValidate) Split(context.Context, jobs.Env, panicParams) ([]int, error) {
	return []int{1}, nil
}
func (panicValidate) Map(context.Context, jobs.Env, int) (int64, error) { return 1, nil }
func (panicValidate) Merge(a, b int64) int64                            { return a + b }

// encodeJob is a byte-level job whose aggregate panics when it is encoded with merges in it:
// MarshalBinary, or (snapshot) the encoding a Snapshot returns, which runs off the loop.
type encodeJob struct {
	name     string
	snapshot bool
	gate     *snapGate // holds maps back until an aggregate with merges was encoded (snapshot or marshal)
}

// snapGate makes sure the leader snapshots an aggregate with merges in it before the job can
// end: a job's terminal checkpoint has no aggregate, so a job whose merges all land while one
// checkpoint write is slow would never encode one.
type snapGate struct {
	once  sync.Once
	taken chan struct{}
	maps  atomic.Int32
}

func newSnapGate() *snapGate { return &snapGate{taken: make(chan struct{})} }

func (j encodeJob) Type() string                   { return j.name }
func (j encodeJob) Validate(json.RawMessage) error { return nil }
func (j encodeJob) Split(context.Context, jobs.Env, json.RawMessage) ([][]byte, error) {
	out := make([][]byte, 20)
	for i := range out {
		out[i] = []byte("1")
	}
	return out, nil
}
func (j encodeJob) Map(context.Context, jobs.Env, jobs.Task) ([]byte, error) {
	time.Sleep(10 * time.Millisecond)
	if g := j.gate; g != nil && g.maps.Add(1) > 2 {
		select {
		case <-g.taken:
		case <-time.After(10 * time.Second):
		}
	}
	return []byte("1"), nil
}
func (j encodeJob) NewAggregate(json.RawMessage) (jobs.Aggregate, error) {
	if j.snapshot {
		return &snapAgg{gate: j.gate}, nil
	}
	return &countAgg{gate: j.gate}, nil
}

type countAgg struct {
	n    int
	gate *snapGate
}

func (a *countAgg) Merge([]byte) error { a.n++; return nil }
func (a *countAgg) MarshalBinary() ([]byte, error) {
	if a.n > 0 {
		if a.gate != nil {
			a.gate.once.Do(func() { close(a.gate.taken) })
		}
		panic("marshal")
	}
	return []byte("0"), nil
}
func (a *countAgg) UnmarshalBinary([]byte) error     { return nil }
func (a *countAgg) Result() (json.RawMessage, error) { return json.Marshal(a.n) }

type snapAgg struct {
	countAgg
	gate *snapGate
}

func (a *snapAgg) MarshalBinary() ([]byte, error) { return []byte("0"), nil }
func (a *snapAgg) Snapshot() func() ([]byte, error) {
	n := a.n
	if n > 0 && a.gate != nil {
		a.gate.once.Do(func() { close(a.gate.taken) })
	}
	return func() ([]byte, error) {
		if n > 0 {
			panic("snapshot")
		}
		return []byte("0"), nil
	}
}

// Every other leader-side call of job code is isolated too: parameter validation, Identity,
// Count, Shard (dispatch), and aggregate encoding in the loop and in the background writer.
func TestLead_EveryLeaderCallIsolated(t *testing.T) {
	r := newRig(t)
	reg := builtin.Registry()
	clientReg := builtin.Registry()
	for _, j := range []jobs.Job{
		jobs.Typed("panic-identity", jobs.TypedJob[nParams, int, int64](panicIdentity{})),
		jobs.Typed("panic-count", jobs.TypedJob[nParams, int, int64](panicCount{})),
		jobs.Typed("panic-shard", jobs.TypedJob[nParams, int, int64](panicShard{})),
		encodeJob{name: "panic-marshal", gate: newSnapGate()},
		encodeJob{name: "panic-snapshot", snapshot: true, gate: newSnapGate()},
	} {
		if err := reg.Register(j); err != nil {
			t.Fatal(err)
		}
		if err := clientReg.Register(j); err != nil {
			t.Fatal(err)
		}
	}
	// The submitter validates with a sane build of panic-validate; the leader's panics.
	if err := reg.Register(jobs.Typed("panic-validate", jobs.TypedJob[panicParams, int, int64](panicValidate{}))); err != nil {
		t.Fatal(err)
	}
	if err := clientReg.Register(jobs.Typed("panic-validate", jobs.TypedJob[nParams, int, int64](sumJob{}))); err != nil {
		t.Fatal(err)
	}
	r.cl.Registry = clientReg
	var evs codeEvents
	l := r.leadWith(1, func(c *Config) {
		// A checkpoint after every merge: an aggregate is encoded with merges in it.
		c.Registry, c.OnEvent, c.CheckpointEvery = reg, evs.on, 1
	})
	r.work(worker.Config{Registry: reg, Concurrency: 4})

	const primes = `{"from":0,"to":100000,"shards":10}`
	good := r.submit("primes", primes)
	want := map[string]string{
		"panic-identity": "panic-identity new aggregate: panic: identity [at ",
		"panic-count":    "panic-count plan: panic: count [at ",
		"panic-shard":    "panic-shard shard: panic: shard 2 [at ",
		"panic-validate": "panic-validate validate: panic: validate [at ",
		"panic-marshal":  "panic-marshal encode aggregate: panic: marshal [at ",
		"panic-snapshot": "panic-snapshot encode aggregate: panic: snapshot [at ",
	}
	ids := map[string]string{}
	for typ := range want {
		ids[typ] = r.submit(typ, `{"n":8}`)
	}
	for typ, w := range want {
		st := r.wait(ids[typ], 20*time.Second)
		if st.State != jobs.StateFailed || !strings.Contains(st.Error, w) {
			t.Errorf("%s: %s %q, want failed with %q", typ, st.State, st.Error, w)
		}
		if len(evs.of(EventJobCodeFailed, ids[typ])) == 0 {
			t.Errorf("%s: no %s event", typ, EventJobCodeFailed)
		}
	}
	st := r.wait(good, 30*time.Second)
	if st.State != jobs.StateSucceeded {
		t.Fatalf("primes: %s %s", st.State, st.Error)
	}
	sameJSON(t, st.Result, sequential(t, nil, "primes", primes))
	select {
	case <-l.done:
		t.Fatalf("the term ended: %v", l.err)
	default:
	}
}
