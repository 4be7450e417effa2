package coordinator

import (
	"github.com/mapagg/mapagg/internal/coordinator/core"
	"github.com/mapagg/mapagg/jobs"
)

// call runs one call of j's code (see isolate).
func (j *job) call(name string, f func() error) error { return core.Isolate(j.typ(), name, f) }

// typ is j's type (from its spec, or its checkpoint).
func (j *job) typ() string {
	if j.spec != nil {
		return j.spec.Type
	}
	return j.cp.Type
}

// fail ends j as failed by err. An error of the job's code (a *UserCodeError in its chain) is
// reported too: logged with its stack, and an EventJobCodeFailed.
func (t *term) fail(j *job, err error) {
	if j.cp.State.Terminal() {
		return
	}
	t.rep.codeFailed(j.id, err)
	t.end(j, jobs.StateFailed, err.Error())
}
