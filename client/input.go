package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/mapagg/mapagg/jobs"
)

// ErrNoSuchContainer is matched by Submit's and Retry's error for a job whose input container
// does not exist. The error is also a *jobs.ParamError of field "container", so Refused is true
// and nothing was written.
var ErrNoSuchContainer = errors.New("no such container")

// ContainerChecker says whether a container of the storage account exists (store.Env does).
type ContainerChecker interface {
	ContainerExists(ctx context.Context, name string) (bool, error)
}

// containerError is a job over a missing input container: a parameter error of field
// "container" that also matches ErrNoSuchContainer.
type containerError struct{ param *jobs.ParamError }

func (e *containerError) Error() string   { return e.param.Error() }
func (e *containerError) Unwrap() []error { return []error{ErrNoSuchContainer, e.param} }

// checkInput refuses a job whose parameters name an input container ("container" at the top
// level, as jobs.BlobInput writes it) that the account lacks. It checks nothing without
// Containers, and lets the job through when it cannot tell (a credential scoped to the jobs
// container, storage failing): the leader's split then says what is wrong.
func (c *Client) checkInput(ctx context.Context, typ string, params json.RawMessage) error {
	if c.Containers == nil {
		return nil
	}
	var p struct {
		Container string `json:"container"`
	}
	if json.Unmarshal(params, &p) != nil || p.Container == "" || jobs.ContainerNameProblem(p.Container) != "" {
		return nil
	}
	ok, err := c.Containers.ContainerExists(ctx, p.Container)
	if err != nil || ok {
		return nil
	}
	return &containerError{param: &jobs.ParamError{Job: typ, Field: "container", Reason: fmt.Sprintf(
		`input container %q does not exist in this storage account: upload the input first (worker put LOCAL %s/PREFIX), or fix "container"`,
		p.Container, p.Container)}}
}
