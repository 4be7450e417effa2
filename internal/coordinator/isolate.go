package coordinator

import (
	"github.com/mapagg/mapagg/internal/coordinator/core"
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
